/*
 * ptpunicast: N emulated ITU-T G.8275.2 PTP clients (IEEE 1588-2019 unicast negotiation, clause 16.1, over UDPv4)
 * against one grandmaster, for the unicast-capacity benchmark (bench/ptp_unicast.py).
 *
 *   ptpunicast -g 10.77.255.254 -n 1000 -d 30 -w 5 -r 500 -a 10.77.0.1 [-l 0] [-D 44] [-T 0]
 *
 * Every client has its own IPv4 source address (FIRST_IP + i, which must be configured on a local interface) and its
 * own clockIdentity.  Two sockets bound to INADDR_ANY ports 319 (event) and 320 (general) carry every client: a
 * packet is sent from its client's address with IP_PKTINFO, and a received packet is attributed to the client whose
 * address it was sent to (IP_PKTINFO destination address).
 *
 * Per client: one Signaling message with three REQUEST_UNICAST_TRANSMISSION TLVs (Announce, Sync, Delay_Resp) to the
 * grandmaster's port 320; GRANT_UNICAST_TRANSMISSION TLVs are collected (a zero duration is a denial), an unanswered
 * request is repeated after -t s (at most 3 times) and a grant is renewed at half its duration.  Clients start at -r
 * per second.  Once granted a client sends a Delay_Req every 2^-q s (random phase) and counts the Delay_Resps that
 * carry its requestingPortIdentity and sequenceId.
 *
 * Measurement window: it opens after the ramp plus -w s of warm-up, and lasts -d s (rounded to whole Sync
 * intervals).  Each client's window is shifted by half a Sync interval from the phase of the Syncs it received
 * during the warm-up, so that each nominal Sync sits in the middle of its slot: a client expects exactly
 * window / interval Syncs, and missed = expected - received (per client, never negative).  Time, not sequenceId,
 * decides: ptp4l numbers Syncs per port, not per destination, so a client's sequenceIds jump by the client count
 * (reported as sync_seq_jumps, for information).  Timeliness apart: sync_late_slots counts, for the Syncs in the
 * window, the Sync slots skipped since the client's previous Sync (a gap over 1.5 intervals), so a grandmaster that
 * stalls and then sends the Syncs it owes in a burst shows there although nothing is missed; sync_max_gap_ms is the
 * longest such gap.  Follow_Ups are paired with the client's last Sync by sequenceId, in either order of arrival
 * (they come on different sockets).  Delay_Reqs sent and Announces received are counted in the global window
 * [start, start + window).
 *
 * At the end every granted client sends CANCEL_UNICAST_TRANSMISSION for the three types and ACKNOWLEDGE_CANCEL TLVs
 * are counted (ptp4l 3.1.1 as a server does not acknowledge).  Prints one JSON line.  Kernel receive timestamps
 * (SO_TIMESTAMPNS) time the Syncs, so a late read by this program does not look like a late Sync; socket receive
 * queue overflows (SO_RXQ_OVFL) are reported as rx_queue_drops: if non-zero, the loss was here, not at the master.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PORT_EVENT 319
#define PORT_GENERAL 320
#define BATCH 256
#define PKT_MAX 512
#define MAX_CLIENTS 65534
#define MAX_RETRIES 3

enum { SYNC = 0x0, DELAY_REQ = 0x1, FOLLOW_UP = 0x8, DELAY_RESP = 0x9, ANNOUNCE = 0xB, SIGNALING = 0xC };
enum { TLV_REQUEST = 0x0004, TLV_GRANT = 0x0005, TLV_CANCEL = 0x0006, TLV_ACK_CANCEL = 0x0007 };
enum { ST_IDLE, ST_REQUESTED, ST_GRANTED, ST_DENIED, ST_NOREPLY, ST_CANCELLED };
enum { EV_NEG, EV_DREQ };

/* The three negotiated message types, as bits of the per-client masks. */
static const uint8_t neg_type[3] = {ANNOUNCE, SYNC, DELAY_RESP};
static int type_bit(int mt) { return mt == ANNOUNCE ? 1 : mt == SYNC ? 2 : mt == DELAY_RESP ? 4 : 0; }

typedef struct {
    uint32_t ip;           /* network order */
    uint8_t id[8];         /* clockIdentity; portNumber is 1 */
    uint8_t state, reply_mask, deny_mask, ack_mask, renewing, retries, fup_pending, dreq_bits;
    uint16_t sig_seq, dreq_seq, last_sync_seq, last_fup_seq;
    uint8_t have_sync_seq, have_fup_seq;
    uint32_t min_grant_s;
    int64_t req_ns, grant_ns, neg_deadline;
    int64_t last_pre_sync, win_start, last_sync_rx;
    uint32_t syncs_in_win, late_slots;
} client_t;

typedef struct { int64_t t; uint32_t client; uint32_t kind; } event_t;

static event_t *heap;
static size_t heap_n, heap_cap;

static void heap_push(int64_t t, uint32_t client, uint32_t kind) {
    if (heap_n == heap_cap) {
        heap_cap = heap_cap ? heap_cap * 2 : 4096;
        heap = realloc(heap, heap_cap * sizeof(event_t));
        if (!heap) { perror("ptpunicast: realloc"); exit(1); }
    }
    size_t i = heap_n++;
    while (i > 0 && heap[(i - 1) / 2].t > t) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
    heap[i] = (event_t){t, client, kind};
}

static event_t heap_pop(void) {
    event_t top = heap[0], last = heap[--heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= heap_n) break;
        if (c + 1 < heap_n && heap[c + 1].t < heap[c].t) c++;
        if (heap[c].t >= last.t) break;
        heap[i] = heap[c];
        i = c;
    }
    if (heap_n) heap[i] = last;
    return top;
}

static int64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static int64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = (uint8_t)v; }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* configuration */
static uint32_t gm_ip;
static int n_clients = 100, log_sync = 0, log_announce = 0, log_dreq = 0, domain = 44, sdo = 0, verbose = 0;
static double duration_s = 30, warmup_s = 5, ramp_per_s = 500, reply_timeout_s = 2;
static uint32_t grant_duration_s = 300;
static client_t *clients;

/* counters */
static uint64_t granted, denied, no_reply, neg_requests, neg_retries, renewals_sent, renewals_granted,
    renewals_denied, grant_tlvs, syncs_received, syncs_total, follow_ups, follow_ups_total, delay_req_sent,
    delay_resp_received, delay_resp_total, announce_received, announce_total, cancel_sent, cancel_acked,
    cancel_ack_tlvs, gm_cancels, sync_seq_jumps, unknown_rx, bad_rx, send_errors, no_unicast_flag, unsolicited_syncs;
static uint32_t rx_queue_drops[2];
static int64_t *grant_latency;
static size_t n_grant_latency;

/* one outgoing batch per socket */
typedef struct {
    int fd, n;
    uint8_t pkt[BATCH][PKT_MAX];
    struct iovec iov[BATCH];
    struct sockaddr_in dst[BATCH];
    union { char buf[CMSG_SPACE(sizeof(struct in_pktinfo))]; struct cmsghdr align; } ctl[BATCH];
    struct mmsghdr msg[BATCH];
} txq_t;

static txq_t txq[2]; /* 0: event (319), 1: general (320) */

static void flush(txq_t *q) {
    int off = 0;
    while (off < q->n) {
        int r = sendmmsg(q->fd, q->msg + off, q->n - off, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            static int reported;
            if (!reported++) perror("ptpunicast: sendmmsg");
            send_errors++; /* skip the failing message and go on with the rest */
            off++;
            continue;
        }
        off += r;
    }
    q->n = 0;
}

/* Returns a zeroed buffer queued for sending from the client's address; the caller fills it and sets the length. */
static uint8_t *enqueue(int general, const client_t *c, size_t len) {
    txq_t *q = &txq[general];
    if (q->n == BATCH) flush(q);
    int i = q->n++;
    memset(q->pkt[i], 0, len);
    q->iov[i] = (struct iovec){q->pkt[i], len};
    q->dst[i] = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(general ? PORT_GENERAL : PORT_EVENT),
                                     .sin_addr.s_addr = gm_ip};
    memset(&q->ctl[i], 0, sizeof(q->ctl[i]));
    struct msghdr *m = &q->msg[i].msg_hdr;
    memset(&q->msg[i], 0, sizeof(q->msg[i]));
    m->msg_name = &q->dst[i];
    m->msg_namelen = sizeof(q->dst[i]);
    m->msg_iov = &q->iov[i];
    m->msg_iovlen = 1;
    m->msg_control = q->ctl[i].buf;
    m->msg_controllen = sizeof(q->ctl[i].buf);
    struct cmsghdr *cm = CMSG_FIRSTHDR(m);
    cm->cmsg_level = IPPROTO_IP;
    cm->cmsg_type = IP_PKTINFO;
    cm->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
    struct in_pktinfo pi = {.ipi_ifindex = 0};
    pi.ipi_spec_dst.s_addr = c->ip;
    memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
    return q->pkt[i];
}

/* IEEE 1588-2019 13.3 common header */
static void header(uint8_t *p, int type, size_t len, const client_t *c, uint16_t seq, int control) {
    p[0] = (uint8_t)(sdo << 4 | type);
    p[1] = 0x12; /* minorVersionPTP 1, versionPTP 2 */
    put16(p + 2, (uint16_t)len);
    p[4] = (uint8_t)domain;
    p[6] = 0x04; /* flagField octet 0: unicastFlag */
    memcpy(p + 20, c->id, 8);
    put16(p + 28, 1);
    put16(p + 30, seq);
    p[32] = (uint8_t)control;
    p[33] = 0x7F;
}

static void send_request(client_t *c) {
    size_t len = 34 + 10 + 3 * 10;
    uint8_t *p = enqueue(1, c, len);
    header(p, SIGNALING, len, c, c->sig_seq++, 5);
    memset(p + 34, 0xFF, 10); /* targetPortIdentity: all ones */
    int logs[3] = {log_announce, log_sync, log_dreq};
    for (int k = 0; k < 3; k++) {
        uint8_t *t = p + 44 + 10 * k;
        put16(t, TLV_REQUEST);
        put16(t + 2, 6);
        t[4] = (uint8_t)(neg_type[k] << 4);
        t[5] = (uint8_t)(int8_t)logs[k];
        put32(t + 6, grant_duration_s);
    }
    c->reply_mask = c->deny_mask = 0;
    c->min_grant_s = UINT32_MAX;
    neg_requests++;
}

static void send_cancel(client_t *c) {
    size_t len = 34 + 10 + 3 * 6;
    uint8_t *p = enqueue(1, c, len);
    header(p, SIGNALING, len, c, c->sig_seq++, 5);
    memset(p + 34, 0xFF, 10);
    for (int k = 0; k < 3; k++) {
        uint8_t *t = p + 44 + 6 * k;
        put16(t, TLV_CANCEL);
        put16(t + 2, 2);
        t[4] = (uint8_t)(neg_type[k] << 4);
    }
    cancel_sent++;
}

static void send_delay_req(client_t *c, int in_window) {
    uint8_t *p = enqueue(0, c, 44);
    header(p, DELAY_REQ, 44, c, c->dreq_seq, 1);
    int64_t now = clock_ns(CLOCK_REALTIME);
    uint64_t sec = (uint64_t)(now / 1000000000LL);
    put16(p + 34, (uint16_t)(sec >> 32));
    put32(p + 36, (uint32_t)sec);
    put32(p + 40, (uint32_t)(now % 1000000000LL));
    c->dreq_bits = (uint8_t)(c->dreq_bits << 1 | (in_window ? 1 : 0));
    c->dreq_seq++;
    if (in_window) delay_req_sent++;
}

static int id_match(const uint8_t *pid, const client_t *c) { return !memcmp(pid, c->id, 8) && get16(pid + 8) == 1; }

/* timing */
static int64_t t0, ws, win_ns, interval_ns, dreq_interval_ns, max_gap_ns;
static int phase_run = 1;

static void schedule_neg(client_t *c, uint32_t idx, int64_t t) {
    c->neg_deadline = t;
    heap_push(t, idx, EV_NEG);
}

static void on_signaling(client_t *c, uint32_t idx, const uint8_t *p, size_t len, int64_t now) {
    if (len < 44) { bad_rx++; return; }
    static const uint8_t ones[10] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    if (!id_match(p + 34, c) && memcmp(p + 34, ones, 10)) { unknown_rx++; return; }
    size_t off = 44, end = get16(p + 2) < len ? get16(p + 2) : len;
    while (off + 4 <= end) {
        uint16_t type = get16(p + off), tlen = get16(p + off + 2);
        const uint8_t *v = p + off + 4;
        if (off + 4 + tlen > end) { bad_rx++; break; }
        if (type == TLV_GRANT && tlen >= 8) {
            grant_tlvs++;
            int bit = type_bit(v[0] >> 4);
            uint32_t dur = get32(v + 2);
            if (bit && (c->state == ST_REQUESTED || c->renewing) && !(c->reply_mask & bit)) {
                c->reply_mask |= bit;
                if (!dur) c->deny_mask |= bit;
                else if (dur < c->min_grant_s) c->min_grant_s = dur;
                if (c->reply_mask == 7) {
                    if (c->renewing) {
                        c->renewing = 0;
                        if (c->deny_mask) renewals_denied++; else renewals_granted++;
                        if (!c->deny_mask) schedule_neg(c, idx, now + (int64_t)c->min_grant_s * 500000000LL);
                        else c->neg_deadline = 0;
                    } else if (c->deny_mask) {
                        c->state = ST_DENIED;
                        c->neg_deadline = 0;
                        denied++;
                    } else {
                        c->state = ST_GRANTED;
                        c->grant_ns = now;
                        granted++;
                        grant_latency[n_grant_latency++] = now - c->req_ns;
                        schedule_neg(c, idx, now + (int64_t)c->min_grant_s * 500000000LL); /* renew at half */
                        heap_push(now + (int64_t)(drand48() * (double)dreq_interval_ns), idx, EV_DREQ);
                    }
                }
            }
        } else if (type == TLV_ACK_CANCEL && tlen >= 2) {
            int bit = type_bit(v[0] >> 4);
            cancel_ack_tlvs++;
            if (bit && !(c->ack_mask & bit)) {
                c->ack_mask |= bit;
                if (c->ack_mask == 7) cancel_acked++;
            }
        } else if (type == TLV_CANCEL) {
            gm_cancels++;
        }
        off += 4 + tlen;
    }
}

/* In-window Syncs whose Follow_Up never paired (the next Sync came first): a few kept to say which and when. */
static uint64_t fup_unpaired;
static int n_fup_examples;
typedef struct { int client; uint16_t sync_seq, fup_seq; uint8_t have_fup; double at_ms; } fup_example_t;
static fup_example_t fup_examples[8];

static void on_sync(client_t *c, const uint8_t *p, int64_t t) {
    syncs_total++;
    if (c->fup_pending) {
        fup_unpaired++;
        if (n_fup_examples < 8)
            fup_examples[n_fup_examples++] = (fup_example_t){(int)(c - clients), c->last_sync_seq, c->last_fup_seq,
                                                             c->have_fup_seq, (c->last_sync_rx - ws) / 1e6};
    }
    if (c->state != ST_GRANTED && c->state != ST_CANCELLED) unsolicited_syncs++;
    uint16_t seq = get16(p + 30);
    if (c->have_sync_seq && seq != (uint16_t)(c->last_sync_seq + 1)) sync_seq_jumps++;
    c->have_sync_seq = 1;
    c->last_sync_seq = seq;
    c->fup_pending = 0;
    int64_t prev = c->last_sync_rx;
    c->last_sync_rx = t;
    if (t < ws) {
        c->last_pre_sync = t;
        return;
    }
    if (!c->win_start) {
        int64_t a = ws;
        if (c->last_pre_sync) {
            a = c->last_pre_sync + interval_ns / 2;
            if (a < ws) a += (ws - a + interval_ns - 1) / interval_ns * interval_ns;
        }
        c->win_start = a;
    }
    if (t >= c->win_start && t < c->win_start + win_ns) {
        c->syncs_in_win++;
        syncs_received++;
        if (prev && t - prev > interval_ns * 3 / 2) { /* slots without a timely Sync, even if it came later */
            c->late_slots += (uint32_t)((t - prev + interval_ns / 2) / interval_ns - 1);
        }
        if (prev && t - prev > max_gap_ns) max_gap_ns = t - prev;
        if (c->have_fup_seq && c->last_fup_seq == seq) follow_ups++; /* the Follow_Up was read first */
        else c->fup_pending = 1;
    }
}

static void on_packet(int general, const uint8_t *p, size_t len, uint32_t dst, int64_t t) {
    uint32_t idx = ntohl(dst) - ntohl(clients[0].ip);
    if (idx >= (uint32_t)n_clients) { unknown_rx++; return; }
    client_t *c = &clients[idx];
    if (len < 34 || (p[1] & 0x0F) != 2 || p[4] != domain || get16(p + 2) > len) { bad_rx++; return; }
    int type = p[0] & 0x0F;
    if (!(p[6] & 0x04)) no_unicast_flag++;
    int in_global = t >= ws && t < ws + win_ns;
    switch (type) {
        case SYNC:
            if (len < 44) { bad_rx++; return; }
            on_sync(c, p, t);
            break;
        case FOLLOW_UP:
            if (len < 44) { bad_rx++; return; }
            follow_ups_total++;
            c->have_fup_seq = 1;
            c->last_fup_seq = get16(p + 30);
            if (c->fup_pending && c->have_sync_seq && get16(p + 30) == c->last_sync_seq) {
                c->fup_pending = 0;
                follow_ups++;
            }
            break;
        case DELAY_RESP: {
            if (len < 54) { bad_rx++; return; }
            delay_resp_total++;
            if (!id_match(p + 44, c)) { unknown_rx++; return; }
            uint16_t d = (uint16_t)((uint16_t)(c->dreq_seq - 1) - get16(p + 30));
            if (d < 8 && (c->dreq_bits & (1u << d))) {
                c->dreq_bits &= (uint8_t)~(1u << d);
                delay_resp_received++;
            }
            break;
        }
        case ANNOUNCE:
            announce_total++;
            if (in_global) announce_received++;
            break;
        case SIGNALING:
            on_signaling(c, idx, p, len, t);
            break;
        default:
            bad_rx++;
    }
    (void)general;
}

typedef struct {
    uint8_t pkt[BATCH][PKT_MAX];
    struct iovec iov[BATCH];
    union { char buf[256]; struct cmsghdr align; } ctl[BATCH];
    struct mmsghdr msg[BATCH];
} rxq_t;

static rxq_t rxq;

static int receive(int fd, int general) {
    int total = 0;
    for (int rounds = 0; rounds < 64; rounds++) { /* bounded: at most 64 batches per wake-up */
        for (int i = 0; i < BATCH; i++) {
            rxq.iov[i] = (struct iovec){rxq.pkt[i], PKT_MAX};
            memset(&rxq.msg[i], 0, sizeof(rxq.msg[i]));
            rxq.msg[i].msg_hdr.msg_iov = &rxq.iov[i];
            rxq.msg[i].msg_hdr.msg_iovlen = 1;
            rxq.msg[i].msg_hdr.msg_control = rxq.ctl[i].buf;
            rxq.msg[i].msg_hdr.msg_controllen = sizeof(rxq.ctl[i].buf);
        }
        int n = recvmmsg(fd, rxq.msg, BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0) break;
        int64_t mono = mono_ns(), real = clock_ns(CLOCK_REALTIME), off = real - mono;
        for (int i = 0; i < n; i++) {
            struct msghdr *m = &rxq.msg[i].msg_hdr;
            uint32_t dst = 0;
            int64_t t = mono;
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
                if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
                    struct in_pktinfo pi;
                    memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
                    dst = pi.ipi_addr.s_addr;
                } else if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
                    int64_t k = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec - off;
                    if (k <= mono + 1000000 && k > mono - 10000000000LL) t = k;
                } else if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_RXQ_OVFL) {
                    uint32_t drops;
                    memcpy(&drops, CMSG_DATA(cm), sizeof(drops));
                    rx_queue_drops[general] = drops;
                }
            }
            on_packet(general, rxq.pkt[i], rxq.msg[i].msg_len, dst, t);
        }
        total += n;
        if (n < BATCH) break;
    }
    return total;
}

static int open_socket(int port) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1, rbuf = 32 << 20, sbuf = 8 << 20;
    if (fd < 0) { perror("ptpunicast: socket"); exit(1); }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rbuf, sizeof(rbuf)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rbuf, sizeof(rbuf));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sbuf, sizeof(sbuf)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sbuf, sizeof(sbuf));
    setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "ptpunicast: bind port %d: %s\n", port, strerror(errno));
        exit(1);
    }
    return fd;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s -g GM_IP -n CLIENTS [-d WINDOW_S] [-w WARMUP_S] [-r RAMP_PER_S] [-a FIRST_CLIENT_IP]\n"
            "          [-l LOG_SYNC] [-A LOG_ANNOUNCE] [-q LOG_DELAY_REQ] [-D DOMAIN] [-T MAJOR_SDO_ID]\n"
            "          [-u GRANT_DURATION_S] [-t REPLY_TIMEOUT_S] [-v]\n", argv0);
}

int main(int argc, char **argv) {
    const char *gm = "10.77.255.254", *first = "10.77.0.1";
    int opt;
    while ((opt = getopt(argc, argv, "g:n:d:w:r:a:l:A:q:D:T:u:t:v")) != -1) {
        switch (opt) {
            case 'g': gm = optarg; break;
            case 'n': n_clients = atoi(optarg); break;
            case 'd': duration_s = atof(optarg); break;
            case 'w': warmup_s = atof(optarg); break;
            case 'r': ramp_per_s = atof(optarg); break;
            case 'a': first = optarg; break;
            case 'l': log_sync = atoi(optarg); break;
            case 'A': log_announce = atoi(optarg); break;
            case 'q': log_dreq = atoi(optarg); break;
            case 'D': domain = atoi(optarg); break;
            case 'T': sdo = atoi(optarg); break;
            case 'u': grant_duration_s = (uint32_t)atoi(optarg); break;
            case 't': reply_timeout_s = atof(optarg); break;
            case 'v': verbose = 1; break;
            default: usage(argv[0]); return 2;
        }
    }
    struct in_addr a;
    if (inet_pton(AF_INET, gm, &a) != 1) { usage(argv[0]); return 2; }
    gm_ip = a.s_addr;
    if (inet_pton(AF_INET, first, &a) != 1 || n_clients < 1 || n_clients > MAX_CLIENTS || ramp_per_s <= 0 ||
        duration_s < 0 || warmup_s < 0 || log_sync < -7 || log_sync > 4 || log_dreq < -7 || log_dreq > 6 ||
        domain < 0 || domain > 255 || sdo < 0 || sdo > 15 || grant_duration_s < 10 || reply_timeout_s <= 0) {
        usage(argv[0]);
        return 2;
    }
    clients = calloc((size_t)n_clients, sizeof(client_t));
    grant_latency = calloc((size_t)n_clients, sizeof(int64_t));
    if (!clients || !grant_latency) { perror("ptpunicast: calloc"); return 1; }
    uint32_t base = ntohl(a.s_addr);
    for (int i = 0; i < n_clients; i++) {
        client_t *c = &clients[i];
        c->ip = htonl(base + (uint32_t)i);
        uint8_t ipb[4];
        memcpy(ipb, &c->ip, 4);
        const uint8_t id[8] = {0x02, 0x75, 0x63, 0x6C, ipb[0], ipb[1], ipb[2], ipb[3]};
        memcpy(c->id, id, 8);
        c->sig_seq = (uint16_t)(i * 7919);
        c->dreq_seq = (uint16_t)(i * 104729);
    }
    srand48((long)mono_ns());
    txq[0].fd = open_socket(PORT_EVENT);
    txq[1].fd = open_socket(PORT_GENERAL);

    interval_ns = log_sync >= 0 ? 1000000000LL << log_sync : 1000000000LL >> -log_sync;
    dreq_interval_ns = log_dreq >= 0 ? 1000000000LL << log_dreq : 1000000000LL >> -log_dreq;
    int64_t expected_per_client = (int64_t)(duration_s * 1e9 / (double)interval_ns + 0.5);
    win_ns = expected_per_client * interval_ns;
    int64_t announce_ns = log_announce >= 0 ? 1000000000LL << log_announce : 1000000000LL >> -log_announce;
    double ramp_s = n_clients / ramp_per_s;
    t0 = mono_ns();
    ws = t0 + (int64_t)((ramp_s + warmup_s) * 1e9);
    int64_t run_end = ws + win_ns + interval_ns + 300000000LL; /* every shifted client window has closed */
    int64_t hard_end = run_end + (int64_t)(n_clients / (ramp_per_s * 4) * 1e9) + 30000000000LL;
    int64_t reply_timeout_ns = (int64_t)(reply_timeout_s * 1e9);
    int next_start = 0, next_cancel = 0;
    int64_t cancel_t0 = 0, cancel_done = 0, next_progress = t0 + 5000000000LL;

    for (;;) {
        int64_t now = mono_ns();
        if (now > hard_end) { fprintf(stderr, "ptpunicast: hard time limit reached\n"); break; }
        /* ramp: new negotiations at ramp_per_s */
        while (phase_run && next_start < n_clients && now >= t0 + (int64_t)(next_start * 1e9 / ramp_per_s)) {
            client_t *c = &clients[next_start];
            c->state = ST_REQUESTED;
            c->req_ns = now;
            send_request(c);
            schedule_neg(c, (uint32_t)next_start, now + reply_timeout_ns);
            next_start++;
        }
        while (heap_n && heap[0].t <= now) {
            event_t e = heap_pop();
            client_t *c = &clients[e.client];
            if (e.kind == EV_DREQ) {
                if (!phase_run || c->state != ST_GRANTED || now >= ws + win_ns) continue;
                send_delay_req(c, now >= ws);
                heap_push(e.t + dreq_interval_ns, e.client, EV_DREQ);
                continue;
            }
            if (e.t != c->neg_deadline || !phase_run) continue; /* superseded */
            if (c->state == ST_REQUESTED || c->renewing) { /* no complete answer in time */
                if (c->retries < MAX_RETRIES) {
                    c->retries++;
                    neg_retries++;
                    send_request(c);
                    schedule_neg(c, e.client, now + reply_timeout_ns);
                } else if (c->state == ST_REQUESTED) {
                    c->state = ST_NOREPLY;
                    no_reply++;
                } else {
                    c->renewing = 0; /* the running grant stays until it expires */
                }
            } else if (c->state == ST_GRANTED) { /* renew at half the granted duration */
                c->renewing = 1;
                c->retries = 0;
                renewals_sent++;
                send_request(c);
                schedule_neg(c, e.client, now + reply_timeout_ns);
            }
        }
        if (phase_run && now >= run_end) {
            phase_run = 0;
            cancel_t0 = now;
        }
        if (!phase_run) { /* cancel at four times the ramp rate */
            while (next_cancel < n_clients && now >= cancel_t0 + (int64_t)(next_cancel * 1e9 / (ramp_per_s * 4))) {
                client_t *c = &clients[next_cancel++];
                if (c->state == ST_GRANTED) {
                    send_cancel(c);
                    c->state = ST_CANCELLED;
                }
            }
            if (next_cancel == n_clients && !cancel_done) cancel_done = now;
            if (cancel_done && (now >= cancel_done + 1000000000LL || cancel_acked == cancel_sent)) break;
        }
        flush(&txq[0]);
        flush(&txq[1]);
        if (verbose && now >= next_progress) {
            fprintf(stderr, "ptpunicast: t=%.0fs started %d granted %llu denied %llu syncs %llu in window %llu "
                    "delay_resp %llu rxq_drops %u/%u\n", (now - t0) / 1e9, next_start,
                    (unsigned long long)granted, (unsigned long long)denied, (unsigned long long)syncs_total,
                    (unsigned long long)syncs_received, (unsigned long long)delay_resp_total, rx_queue_drops[0],
                    rx_queue_drops[1]);
            next_progress += 5000000000LL;
        }
        /* sleep until the next due action, at most 5 ms */
        int64_t wake = now + 5000000;
        if (heap_n && heap[0].t < wake) wake = heap[0].t;
        if (phase_run && next_start < n_clients) {
            int64_t r = t0 + (int64_t)(next_start * 1e9 / ramp_per_s);
            if (r < wake) wake = r;
        }
        int64_t wait_ns = wake - mono_ns();
        struct pollfd pfd[2] = {{txq[0].fd, POLLIN, 0}, {txq[1].fd, POLLIN, 0}};
        struct timespec to = {0, wait_ns > 0 ? wait_ns : 0};
        if (ppoll(pfd, 2, &to, NULL) > 0) {
            if (pfd[0].revents & POLLIN) receive(txq[0].fd, 0);
            if (pfd[1].revents & POLLIN) receive(txq[1].fd, 1);
        }
    }
    /* drain what already arrived (Delay_Resps, acknowledgements) */
    receive(txq[0].fd, 0);
    receive(txq[1].fd, 1);

    uint64_t missed = 0, extra = 0, clients_missed = 0, clients_no_sync = 0, late = 0, clients_late = 0;
    for (int i = 0; i < n_clients; i++) {
        const client_t *c = &clients[i];
        int64_t got = c->syncs_in_win;
        if (got < expected_per_client) {
            missed += (uint64_t)(expected_per_client - got);
            clients_missed++;
        } else {
            extra += (uint64_t)(got - expected_per_client);
        }
        if (!got) clients_no_sync++;
        late += c->late_slots;
        if (c->late_slots) clients_late++;
    }
    for (int i = 0; i < n_clients; i++) fup_unpaired += clients[i].fup_pending;
    char examples[1024] = "[";
    for (int i = 0; i < n_fup_examples; i++)
        snprintf(examples + strlen(examples), sizeof(examples) - strlen(examples), "%s[%d,%u,%u,%u,%.1f]",
                 i ? "," : "", fup_examples[i].client, fup_examples[i].sync_seq, fup_examples[i].fup_seq,
                 fup_examples[i].have_fup, fup_examples[i].at_ms);
    strcat(examples, "]");
    qsort(grant_latency, n_grant_latency, sizeof(int64_t), cmp64);
    double lat50 = n_grant_latency ? grant_latency[n_grant_latency / 2] / 1e6 : 0;
    double lat99 = n_grant_latency ? grant_latency[n_grant_latency * 99 / 100] / 1e6 : 0;
    double lat_max = n_grant_latency ? grant_latency[n_grant_latency - 1] / 1e6 : 0;
    uint64_t announce_expected = (uint64_t)n_clients * (uint64_t)(win_ns / announce_ns);
    printf("{\"clients_requested\":%d,\"granted\":%llu,\"denied\":%llu,\"no_reply\":%llu,\"negotiation_requests\":%llu,"
           "\"negotiation_retries\":%llu,\"grant_latency_ms_p50\":%.2f,\"grant_latency_ms_p99\":%.2f,"
           "\"grant_latency_ms_max\":%.2f,\"renewals_sent\":%llu,\"renewals_granted\":%llu,\"renewals_denied\":%llu,"
           "\"grant_tlvs\":%llu,\"log_sync_interval\":%d,\"window_s\":%.3f,\"ramp_s\":%.3f,\"warmup_s\":%.3f,"
           "\"syncs_expected\":%llu,\"syncs_received\":%llu,\"syncs_missed\":%llu,\"syncs_extra\":%llu,"
           "\"clients_missed\":%llu,\"clients_no_sync\":%llu,\"sync_late_slots\":%llu,\"clients_late\":%llu,"
           "\"sync_max_gap_ms\":%.1f,\"syncs_total\":%llu,\"unsolicited_syncs\":%llu,"
           "\"sync_seq_jumps\":%llu,\"follow_ups\":%llu,\"follow_ups_total\":%llu,\"delay_req_sent\":%llu,"
           "\"delay_resp_received\":%llu,\"delay_resp_ratio\":%.6f,\"delay_resp_total\":%llu,"
           "\"announce_expected\":%llu,\"announce_received\":%llu,\"announce_total\":%llu,\"cancel_sent\":%llu,"
           "\"cancel_acked\":%llu,\"cancel_ack_tlvs\":%llu,\"gm_cancels\":%llu,\"unknown_rx\":%llu,\"bad_rx\":%llu,"
           "\"no_unicast_flag\":%llu,\"send_errors\":%llu,\"rx_queue_drops\":%u,\"fup_unpaired\":%llu,"
           "\"fup_unpaired_examples\":%s,\"elapsed_s\":%.3f}\n",
           n_clients, (unsigned long long)granted, (unsigned long long)denied, (unsigned long long)no_reply,
           (unsigned long long)neg_requests, (unsigned long long)neg_retries, lat50, lat99, lat_max,
           (unsigned long long)renewals_sent, (unsigned long long)renewals_granted,
           (unsigned long long)renewals_denied, (unsigned long long)grant_tlvs, log_sync, win_ns / 1e9, ramp_s,
           warmup_s, (unsigned long long)((uint64_t)n_clients * (uint64_t)expected_per_client),
           (unsigned long long)syncs_received, (unsigned long long)missed, (unsigned long long)extra,
           (unsigned long long)clients_missed, (unsigned long long)clients_no_sync, (unsigned long long)late,
           (unsigned long long)clients_late, max_gap_ns / 1e6, (unsigned long long)syncs_total,
           (unsigned long long)unsolicited_syncs, (unsigned long long)sync_seq_jumps,
           (unsigned long long)follow_ups, (unsigned long long)follow_ups_total,
           (unsigned long long)delay_req_sent, (unsigned long long)delay_resp_received,
           delay_req_sent ? (double)delay_resp_received / (double)delay_req_sent : 0.0,
           (unsigned long long)delay_resp_total, (unsigned long long)announce_expected,
           (unsigned long long)announce_received, (unsigned long long)announce_total,
           (unsigned long long)cancel_sent, (unsigned long long)cancel_acked, (unsigned long long)cancel_ack_tlvs,
           (unsigned long long)gm_cancels, (unsigned long long)unknown_rx, (unsigned long long)bad_rx,
           (unsigned long long)no_unicast_flag, (unsigned long long)send_errors,
           rx_queue_drops[0] + rx_queue_drops[1], (unsigned long long)fup_unpaired, examples,
           (mono_ns() - t0) / 1e9);
    return 0;
}
