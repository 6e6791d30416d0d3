/* The Sync sender: a native thread that sends each two-step Sync stream's Sync at its slot and its Follow_Up as soon
 * as the kernel's transmit timestamp is read, and each unicast client's Announces, without the interpreter.
 *
 * I/O edge.  The Python port keeps everything else (negotiation, Delay_Resp, management, the state, the multicast
 * Announces); it hands this object one stream per Sync or Announce grant, and one for the multicast Syncs: the
 * destination, the messages as templates (encoded by the codec; only sequenceId at octet 30 and the first Timestamp
 * at octet 34 change here; an Announce template is shared by every stream of its interval and replaced when what it
 * says changes), the interval and the first slot.  The thread sleeps in ppoll until the earliest slot (a
 * CLOCK_MONOTONIC instant, timer slack 1 ns, SCHED_FIFO when allowed), sends every due Sync with sendmmsg on its own
 * event socket (bound to port 319 beside the port's, in the same SO_REUSEPORT group, every received datagram steered
 * to the port's socket), reads their software transmit timestamps from its error queue (numbered by
 * SOF_TIMESTAMPING_OPT_ID), maps them onto the served clock with the map Python publishes (ClockMap.served_tai_ns),
 * and sends the Follow_Ups with sendmmsg on the port's general socket, as it does the Announces.  Syncs go first:
 * Follow_Ups and Announces go out BITE at a time with a look for due Syncs in between.  Each Sync's lateness
 * (transmit time minus slot, both on the served clock) goes into the same log-linear histogram as
 * outputs/ptp/lateness.py, which ``take()`` hands to the port, with the thread's own timed wake-ups that came over
 * 1 ms late (the scheduler's or the host's share).  The socket is polled only while the thread waits, so no
 * wake-up callback runs between a Sync's timestamp and its leaving.
 *
 * Held time: while the thread runs (between two waits in ppoll), wall time (CLOCK_MONOTONIC) that its CPU time
 * (CLOCK_THREAD_CPUTIME_ID) does not account for is time it was held off the CPU.  For a SCHED_FIFO thread that is
 * the hypervisor's (a kernel with paravirtual steal accounting leaves stolen time out of a task's CPU time; without
 * interrupt-time accounting, interrupt and softirq work done in its context is in it) or a higher-priority thread's.
 * Each Sync carries the held time between its slot and its sending; a Sync over 1 ms late that would have been
 * within 1 ms without it is counted apart (late_over_1ms_held), so a verdict can tell the host's share from the
 * sender's own.  Held time while waiting past a slot is not in it: a Sync late by a timed wake-up that came over
 * 1 ms after its slot (the timer interrupt came late, or the CPU was in a section the kernel does not preempt) is
 * counted apart again (late_over_1ms_woken): the kernel's or the host's, the trace says which.
 *
 * Delay_Req answers (set_delay, for unicast-negotiating clients): the event socket's reuseport program then steers
 * every datagram whose messageType is Delay_Req to this object's socket, and the thread answers those of the
 * clients Python registered (add_client: a Delay_Resp grant) between its Syncs, a token bucket per client at the
 * port's request rate; everything else it does not answer (a client without a grant, another domain or version, a
 * message with a suffix, no receive timestamp, the port not MASTER) goes back to Python whole, with its receive
 * timestamp, through a ring and an eventfd (handoff_fd, take_handoff), where the port decides as it always did.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>

#include "_ptpauth.h"
#include "bucket.h"
#include "clockmap.h"
#include "lateness.h"

#define NS_PER_S 1000000000LL
#define BATCH 64
#define BITE 16  /* Follow_Ups or Announces sent between two looks for due Syncs */
#define MSG_LEN 44
#define ANNOUNCE_MAX 512  /* an Announce with its TLVs (path trace, C37.238) */
#define N_LOGS 16  /* Announce templates by log interval, -8..7 */
enum { KIND_SYNC = 0, KIND_ANNOUNCE = 1 };
#define RING 65536  /* Syncs awaiting their transmit timestamp, by OPT_ID modulo RING */
#define N_BINS LATENESS_BINS
#define LATE_NS 1000000LL
#define TX_WAIT_NS 1000000LL  /* poll for awaited timestamps at least this often */
#define TS_LOST_NS 1000000000LL  /* a timestamp not read within this is counted lost */
#define LATE_RECS 4096  /* the latest Syncs over 1 ms late, for take(): a 400 ms stall's at 10,000 Syncs/s */
#define HELD_MARKS 256
#define DRESP_LEN 54  /* a Delay_Resp: header, receiveTimestamp, requestingPortIdentity */
#define HANDOFF_RING 4096  /* datagrams on their way back to Python */
#define HANDOFF_MAX 1536  /* (monotonic, held total) at each round of the loop and each wait, newest last */

typedef struct {
    int used, kind, log_index;  /* log_index: the Announce template it sends */
    uint32_t gen;
    struct sockaddr_storage event_addr, general_addr;
    socklen_t addr_len;
    uint8_t sync_tpl[MSG_LEN], fup_tpl[MSG_LEN];
    int64_t step_ns, next_slot_ns;
    uint16_t seq;
    uint64_t sent;
} stream;

typedef struct { int64_t slot_ns; int32_t index; uint32_t gen; } heap_item;
typedef struct { heap_item *items; int32_t len, cap; } heap;  /* one per kind: Syncs are looked at first */

typedef struct {
    int32_t index; uint32_t gen; uint16_t seq; int valid;
    int64_t slot_served_ns, sent_mono_ns, held_ns;  /* held_ns: held off the CPU between its slot and its send */
    int64_t pre_ns;  /* from its slot to the start of the send that carried it */
    int64_t woke_ns;  /* of that, how long the thread's timed wake-up for it came after its slot */
} pending;
typedef struct { int64_t mono_ns, held_ns; } held_mark;
typedef struct { int64_t slot_mono_ns, late_ns, held_ns; } late_rec;
typedef struct { uint8_t family, ip[16], port_id[10]; } client_key;  /* source address and sourcePortIdentity */
typedef struct {
    int used;
    client_key key;
    int8_t log_interval;  /* the Delay_Resp grant's */
    tb_bucket bucket;  /* monotonic */
    int64_t last_seen_ns;  /* monotonic */
    uint64_t requests;  /* answered since the last take() */
} dclient;
typedef struct {
    uint16_t len;
    uint8_t data[HANDOFF_MAX];
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int64_t ts_ns;  /* CLOCK_REALTIME receive timestamp, 0 when none */
} handoff;

typedef struct {
    PyObject_HEAD
    int event_fd, general_fd, wake_fd, event_port, general_port;
    pthread_t thread;
    int started, running, active, map_valid, realtime;
    pthread_mutex_t mu;
    /* ClockMap: served TAI ns from host CLOCK_REALTIME ns */
    int64_t host_anchor_ns, served_anchor_ns;
    double rate_ppb;
    stream *streams;
    int32_t n_streams, cap_streams, n_used, free_hint;
    heap heaps[2];
    pending ring[RING];
    uint32_t next_id, oldest_id, awaited;
    uint64_t bins[N_BINS];
    uint8_t announce_tpl[N_LOGS][ANNOUNCE_MAX];
    int announce_len[N_LOGS];  /* 0: none given yet (the stream waits for one) */
    uint64_t late_count, late_over, syncs, follow_ups, announces, send_errors, ts_lost, batches;
    int64_t late_max_ns;
    uint64_t wakes_over_1ms;  /* timed wake-ups for a slot that came over 1 ms after it: the host's, not ours */
    int64_t wake_max_ns;
    uint64_t late_over_held;  /* Syncs over 1 ms late that held time accounts for beyond 1 ms */
    uint64_t late_over_woken;  /* the others over 1 ms late that a late timed wake-up accounts for beyond 1 ms */
    int64_t woke_due_ns, woke_at_ns;  /* the thread's own: the last timed wake-up, due and come (monotonic) */
    /* rounds of the loop that took over 1 ms of the thread's CPU time, the most one took, and what it sent */
    uint64_t long_rounds;
    int64_t long_round_cpu_max_ns;
    int32_t long_round_packets;
    late_rec late_recs[LATE_RECS];  /* the Syncs over 1 ms late since the last take(), the latest LATE_RECS */
    uint32_t n_late_recs;
    int64_t held_max_ns;  /* the most held time of one Sync */
    /* of the Syncs over 1 ms late, the most time before their send began and the most from then to the timestamp */
    int64_t late_pre_max_ns, late_send_max_ns;
    /* the thread's own (no lock): held time over finished running stretches, the current stretch's start */
    int64_t held_total_ns, stretch_mono_ns, stretch_cpu_ns;
    int64_t lock_wait_total_ns;  /* the thread's own: time it waited for the Python side's hold of the lock */
    int64_t lock_wait_max_ns, long_round_lock_ns;  /* under the lock: the longest wait; the longest round's waits */
    held_mark marks[HELD_MARKS];
    uint32_t n_marks;
    /* Delay_Req answers (set_delay) */
    int delay_on, handoff_fd, burst;
    uint8_t dresp_tpl[DRESP_LEN], own_clock[8], domain;
    double rate_per_s;
    dclient *dclients;
    int32_t n_dclients, cap_dclients, n_dused, dfree_hint;  /* dfree_hint: the last one removed */
    int32_t *dslots;  /* open addressing: 0 empty, -1 removed, else client index + 1 */
    int32_t cap_dslots, dslots_taken;  /* taken: used or removed */
    handoff *handoffs;
    uint32_t ho_head, ho_tail;
    uint64_t delay_answered, delay_rate_limited, handed_off, handoff_dropped;
    /* PTP authentication (set_security): every message sent is signed, a Delay_Req answered must be signed */
    ptp_auth *auth;
    uint64_t auth_signed, auth_failed;
} SyncSender;

/* Sign the `len`-octet message at msg in place when the port signs (room for PTPAUTH_MAX more): its new length,
   or 0 when it must not be sent (libcrypto failed). */
static size_t sign(SyncSender *s, uint8_t *msg, size_t len) {
    if (!s->auth) return len;
    size_t signed_len = ptpauth_sign(s->auth, msg, len);
    if (signed_len) s->auth_signed++; else s->auth_failed++;
    return signed_len;
}

/* ------------------------------------------------------------------------------------------------- helpers */

static int64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static int64_t served_ns(const SyncSender *s, int64_t host_ns) {
    return cm_served_tai_ns(s->host_anchor_ns, s->served_anchor_ns, s->rate_ppb, host_ns);
}

static void put_ts(uint8_t *p, int64_t ns) {
    if (ns < 0) ns = 0;
    uint64_t sec = (uint64_t)(ns / NS_PER_S);
    uint32_t frac = (uint32_t)(ns % NS_PER_S);
    p[0] = (uint8_t)(sec >> 40); p[1] = (uint8_t)(sec >> 32); p[2] = (uint8_t)(sec >> 24);
    p[3] = (uint8_t)(sec >> 16); p[4] = (uint8_t)(sec >> 8); p[5] = (uint8_t)sec;
    p[6] = (uint8_t)(frac >> 24); p[7] = (uint8_t)(frac >> 16); p[8] = (uint8_t)(frac >> 8); p[9] = (uint8_t)frac;
}

static void add_lateness(SyncSender *s, int64_t ns, int64_t held_ns, int64_t pre_ns, int64_t woke_ns,
                         int64_t slot_mono_ns) {
    s->bins[lateness_bin(lateness_us(ns))]++;
    s->late_count++;
    if (ns > LATE_NS) {
        s->late_over++;
        if (ns - held_ns <= LATE_NS) s->late_over_held++;
        else if (ns - held_ns - woke_ns <= LATE_NS) s->late_over_woken++;
        s->late_recs[s->n_late_recs++ % LATE_RECS] = (late_rec){slot_mono_ns, ns, held_ns};
        if (pre_ns > s->late_pre_max_ns) s->late_pre_max_ns = pre_ns;
        if (ns - pre_ns > s->late_send_max_ns) s->late_send_max_ns = ns - pre_ns;
    }
    if (ns > s->late_max_ns) s->late_max_ns = ns;
    if (held_ns > s->held_max_ns) s->held_max_ns = held_ns;
}

/* The thread's held time so far: finished stretches plus the current one's wall time less its CPU time. */
static int64_t held_now(const SyncSender *s, int64_t mono_ns) {
    return s->held_total_ns + (mono_ns - s->stretch_mono_ns) - (clock_ns(CLOCK_THREAD_CPUTIME_ID) - s->stretch_cpu_ns);
}

/* The held total at the last mark at or before ``mono_ns`` (a slot); the oldest mark when all are after it, which
 * leaves out held time before it (never counts more than there was). */
static int64_t held_at(const SyncSender *s, int64_t mono_ns) {
    uint32_t n = s->n_marks < HELD_MARKS ? s->n_marks : HELD_MARKS;
    for (uint32_t k = 1; k <= n; k++) {
        const held_mark *m = &s->marks[(s->n_marks - k) % HELD_MARKS];
        if (m->mono_ns <= mono_ns || k == n) return m->held_ns;
    }
    return s->held_total_ns;
}

/* The sender thread takes the lock through this: the time it waits for the Python side to let go of it is the
 * appliance's own, not held time, so it is taken out of the held total. */
static void lock_mu(SyncSender *s) {
    if (pthread_mutex_trylock(&s->mu) == 0) return;
    int64_t t0 = clock_ns(CLOCK_MONOTONIC);
    pthread_mutex_lock(&s->mu);
    int64_t waited = clock_ns(CLOCK_MONOTONIC) - t0;
    s->held_total_ns -= waited;
    s->lock_wait_total_ns += waited;
    if (waited > s->lock_wait_max_ns) s->lock_wait_max_ns = waited;
}

/* ------------------------------------------------------------------------------------------------ the heap */

static int heap_push(heap *h, int64_t slot_ns, int32_t index, uint32_t gen) {
    if (h->len == h->cap) {
        int32_t cap = h->cap ? h->cap * 2 : 1024;
        heap_item *grown = realloc(h->items, (size_t)cap * sizeof(*grown));
        if (grown == NULL) return -1;
        h->items = grown;
        h->cap = cap;
    }
    int32_t i = h->len++;
    while (i > 0) {
        int32_t up = (i - 1) / 2;
        if (h->items[up].slot_ns <= slot_ns) break;
        h->items[i] = h->items[up];
        i = up;
    }
    h->items[i] = (heap_item){slot_ns, index, gen};
    return 0;
}

static heap_item heap_pop(heap *h) {
    heap_item top = h->items[0], last = h->items[--h->len];
    int32_t i = 0, n = h->len;
    for (;;) {
        int32_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && h->items[child + 1].slot_ns < h->items[child].slot_ns) child++;
        if (h->items[child].slot_ns >= last.slot_ns) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (n > 0) h->items[i] = last;
    return top;
}

/* The earliest live slot of a kind (stale entries of removed or changed streams dropped), or -1. */
static int64_t next_slot(SyncSender *s, int kind) {
    heap *h = &s->heaps[kind];
    while (h->len > 0) {
        heap_item top = h->items[0];
        stream *st = &s->streams[top.index];
        if (st->used && st->gen == top.gen && st->next_slot_ns == top.slot_ns) return top.slot_ns;
        heap_pop(h);
    }
    return -1;
}

/* The stream whose slot (at most ``now``) comes first, moved on to its next slot; -1 when none is due. */
static int32_t take_due(SyncSender *s, int kind, int64_t now, int64_t *slot_out) {
    int64_t slot = next_slot(s, kind);
    if (slot < 0 || slot > now) return -1;
    heap_item top = heap_pop(&s->heaps[kind]);
    stream *st = &s->streams[top.index];
    int64_t nxt = slot + st->step_ns;
    st->next_slot_ns = nxt > now ? nxt : now + st->step_ns;  /* a stall is not followed by a burst */
    heap_push(&s->heaps[kind], st->next_slot_ns, top.index, st->gen);
    *slot_out = slot;
    return top.index;
}

static int64_t sendmmsg_all(int fd, struct mmsghdr *out, int n, uint64_t *errors) {
    int64_t sent = 0;
    for (int done = 0; done < n;) {
        int k = sendmmsg(fd, out + done, (unsigned)(n - done), 0);
        if (k <= 0) {  /* this one was not sent; go on with the rest */
            (*errors)++;
            done++;
            continue;
        }
        sent += k;
        done += k;
    }
    return sent;
}

/* Sends ``n`` messages on the port's general socket, counting those sent into ``*sent_count`` (under the lock). */
static void send_general(SyncSender *s, struct mmsghdr *out, int n, uint64_t *sent_count) {
    if (n == 0) return;
    uint64_t errors = 0;
    int64_t sent = sendmmsg_all(s->general_fd, out, n, &errors);
    lock_mu(s);
    *sent_count += (uint64_t)sent;
    s->send_errors += errors;
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------------------------------- Delay_Req answers */

static int make_key(const struct sockaddr_storage *addr, const uint8_t *port_id, client_key *key) {
    memset(key, 0, sizeof(*key));
    if (addr->ss_family == AF_INET) {
        memcpy(key->ip, &((const struct sockaddr_in *)addr)->sin_addr, 4);
    } else if (addr->ss_family == AF_INET6) {
        memcpy(key->ip, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
    } else {
        return -1;
    }
    key->family = (uint8_t)addr->ss_family;
    memcpy(key->port_id, port_id, 10);
    return 0;
}

static uint32_t key_hash(const client_key *key) {
    const uint8_t *p = (const uint8_t *)key;
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (size_t i = 0; i < sizeof(*key); i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

/* The slot of ``key`` in the table (its index + 1 there), or, when absent, the first free one on its probe path
 * (*found 0).  The table is never full: it grows at half. */
static int32_t probe(const SyncSender *s, const client_key *key, int *found) {
    uint32_t mask = (uint32_t)s->cap_dslots - 1, i = key_hash(key) & mask;
    int32_t free_at = -1;
    for (;; i = (i + 1) & mask) {
        int32_t v = s->dslots[i];
        if (v == 0) {
            *found = 0;
            return free_at >= 0 ? free_at : (int32_t)i;
        }
        if (v < 0) {
            if (free_at < 0) free_at = (int32_t)i;
        } else if (memcmp(&s->dclients[v - 1].key, key, sizeof(*key)) == 0) {
            *found = 1;
            return (int32_t)i;
        }
    }
}

static int32_t find_client(const SyncSender *s, const struct sockaddr_storage *addr, const uint8_t *port_id) {
    client_key key;
    int found;
    if (s->cap_dslots == 0 || make_key(addr, port_id, &key) < 0) return -1;
    int32_t at = probe(s, &key, &found);
    return found ? s->dslots[at] - 1 : -1;
}

static int grow_slots(SyncSender *s) {
    int32_t cap = s->cap_dslots ? s->cap_dslots * 2 : 1024;
    while (s->n_dused * 2 >= cap) cap *= 2;
    int32_t *slots = calloc((size_t)cap, sizeof(*slots));
    if (slots == NULL) return -1;
    free(s->dslots);
    s->dslots = slots;
    s->cap_dslots = cap;
    s->dslots_taken = 0;
    for (int32_t i = 0; i < s->n_dclients; i++) {
        if (!s->dclients[i].used) continue;
        int found;
        s->dslots[probe(s, &s->dclients[i].key, &found)] = i + 1;
        s->dslots_taken++;
    }
    return 0;
}

static int64_t rx_timestamp(struct msghdr *msg) {
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPING) {
            struct timespec ts[3];
            memcpy(ts, CMSG_DATA(cm), sizeof(ts));
            return (int64_t)ts[0].tv_sec * NS_PER_S + ts[0].tv_nsec;
        }
    }
    return 0;
}

/* A Delay_Req this thread answers itself: exactly a 44-octet Delay_Req of PTP version 2 (majorSdoId 0) in the
 * port's domain with the unicast flag, not our own, from a registered client.  The rest goes to Python. */
static int32_t answerable(const SyncSender *s, const uint8_t *m, unsigned len, const struct sockaddr_storage *from) {
    if (!s->delay_on || !s->active || !s->map_valid) return -1;
    if (s->auth ? len != MSG_LEN + ptpauth_extra(s->auth) : len != MSG_LEN) return -1;  /* signed: by our key only */
    if (m[0] != 0x01 || (m[1] & 0x0f) != 2 || (unsigned)((m[2] << 8) | m[3]) != len || m[4] != s->domain) return -1;
    if (s->auth && !ptpauth_verify(s->auth, m, len, MSG_LEN)) return -1;  /* Python counts why it is refused */
    if (!(m[6] & 0x04) || memcmp(m + 20, s->own_clock, 8) == 0) return -1;
    return find_client(s, from, m + 20);
}

static void push_handoff(SyncSender *s, const uint8_t *m, unsigned len, const struct sockaddr_storage *from,
                         socklen_t from_len, int64_t ts) {
    if (s->ho_tail - s->ho_head >= HANDOFF_RING || len > HANDOFF_MAX) {
        s->handoff_dropped++;
        return;
    }
    handoff *h = &s->handoffs[s->ho_tail++ % HANDOFF_RING];
    h->len = (uint16_t)len;
    memcpy(h->data, m, len);
    h->addr = *from;
    h->addr_len = from_len;
    h->ts_ns = ts;
    s->handed_off++;
}

/* Reads at most ``limit`` datagrams from the event socket (the Delay_Reqs steered to it), answers what it may and
 * hands the rest to Python; returns how many it read. */
static int answer_delay_reqs(SyncSender *s, int limit) {
    if (!__atomic_load_n(&s->delay_on, __ATOMIC_ACQUIRE)) return 0;
    struct mmsghdr in[BITE], out[BITE];
    struct iovec iov[BITE], oiov[BITE];
    static __thread uint8_t bufs[BITE][HANDOFF_MAX];
    uint8_t ctrls[BITE][256], resp[BITE][DRESP_LEN + PTPAUTH_MAX];
    struct sockaddr_storage from[BITE];
    if (limit > BITE) limit = BITE;
    for (int i = 0; i < limit; i++) {
        iov[i] = (struct iovec){bufs[i], HANDOFF_MAX};
        memset(&in[i], 0, sizeof(in[i]));
        in[i].msg_hdr.msg_name = &from[i];
        in[i].msg_hdr.msg_namelen = sizeof(from[i]);
        in[i].msg_hdr.msg_iov = &iov[i];
        in[i].msg_hdr.msg_iovlen = 1;
        in[i].msg_hdr.msg_control = ctrls[i];
        in[i].msg_hdr.msg_controllen = sizeof(ctrls[i]);
    }
    int n = recvmmsg(s->event_fd, in, (unsigned)limit, MSG_DONTWAIT, NULL);
    if (n <= 0) return 0;
    int n_out = 0, handed = 0;
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    lock_mu(s);
    for (int i = 0; i < n; i++) {
        const uint8_t *m = bufs[i];
        unsigned len = in[i].msg_len;
        int64_t ts = rx_timestamp(&in[i].msg_hdr);
        int32_t who = (in[i].msg_hdr.msg_flags & MSG_TRUNC) || ts == 0 ? -1 : answerable(s, m, len, &from[i]);
        if (who < 0) {
            push_handoff(s, m, len, &from[i], in[i].msg_hdr.msg_namelen, ts);
            handed = 1;
            continue;
        }
        dclient *d = &s->dclients[who];
        if (s->rate_per_s > 0 && !tb_take(&d->bucket, s->rate_per_s, (double)s->burst, now)) {
            s->delay_rate_limited++;
            continue;
        }
        d->requests++;
        d->last_seen_ns = now;
        uint8_t *r = resp[n_out];
        memcpy(r, s->dresp_tpl, DRESP_LEN);
        memcpy(r + 8, m + 8, 8);  /* correctionField */
        r[30] = m[30];  /* sequenceId */
        r[31] = m[31];
        r[33] = (uint8_t)d->log_interval;
        put_ts(r + 34, served_ns(s, ts));
        memcpy(r + 44, m + 20, 10);  /* requestingPortIdentity */
        size_t rlen = sign(s, r, DRESP_LEN);
        if (!rlen) continue;
        struct sockaddr_storage *to = &from[i];  /* answered to the general port */
        if (to->ss_family == AF_INET) ((struct sockaddr_in *)to)->sin_port = htons((uint16_t)s->general_port);
        else ((struct sockaddr_in6 *)to)->sin6_port = htons((uint16_t)s->general_port);
        oiov[n_out] = (struct iovec){r, rlen};
        memset(&out[n_out], 0, sizeof(out[n_out]));
        out[n_out].msg_hdr.msg_name = to;
        out[n_out].msg_hdr.msg_namelen = in[i].msg_hdr.msg_namelen;
        out[n_out].msg_hdr.msg_iov = &oiov[n_out];
        out[n_out].msg_hdr.msg_iovlen = 1;
        n_out++;
    }
    pthread_mutex_unlock(&s->mu);
    if (handed) {
        uint64_t one = 1;
        if (write(s->handoff_fd, &one, sizeof(one)) < 0) { /* already signalled */ }
    }
    send_general(s, out, n_out, &s->delay_answered);
    return n;
}

/* ------------------------------------------------------------------------------------------------ the thread */

/* Reads at most ``limit`` transmit timestamps and sends their Follow_Ups; returns how many it read. */
static int read_timestamps(SyncSender *s, int limit) {
    uint8_t data[64], ctrl[512];
    struct mmsghdr out[BATCH];
    struct iovec iov[BATCH];
    uint8_t fups[BATCH][MSG_LEN + PTPAUTH_MAX];
    int n_out = 0, n_read = 0;
    while (n_read < limit) {
        struct iovec v = {data, sizeof(data)};
        struct msghdr mh = {0};
        mh.msg_iov = &v;
        mh.msg_iovlen = 1;
        mh.msg_control = ctrl;
        mh.msg_controllen = sizeof(ctrl);
        ssize_t got = recvmsg(s->event_fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT);
        if (got < 0) break;
        n_read++;
        int64_t ts_ns = 0;
        int has_id = 0;
        uint32_t id = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPING) {
                struct timespec *t = (struct timespec *)CMSG_DATA(cm);
                ts_ns = (int64_t)t[0].tv_sec * NS_PER_S + t[0].tv_nsec;
            } else if ((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
                       (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)) {
                struct sock_extended_err *ee = (struct sock_extended_err *)CMSG_DATA(cm);
                if (ee->ee_origin == SO_EE_ORIGIN_TIMESTAMPING) {
                    has_id = 1;
                    id = ee->ee_data;
                }
            }
        }
        if (!has_id || ts_ns == 0) continue;
        lock_mu(s);
        pending *p = &s->ring[id % RING];
        if (p->valid) {
            p->valid = 0;
            s->awaited--;
            stream *st = &s->streams[p->index];
            if (st->used && st->gen == p->gen) {
                int64_t tx_served = served_ns(s, ts_ns);
                add_lateness(s, tx_served - p->slot_served_ns, p->held_ns, p->pre_ns, p->woke_ns,
                             p->sent_mono_ns - p->pre_ns);
                memcpy(fups[n_out], st->fup_tpl, MSG_LEN);
                fups[n_out][30] = (uint8_t)(p->seq >> 8);
                fups[n_out][31] = (uint8_t)p->seq;
                put_ts(fups[n_out] + 34, tx_served);
                size_t flen = sign(s, fups[n_out], MSG_LEN);
                if (!flen) { pthread_mutex_unlock(&s->mu); continue; }
                iov[n_out] = (struct iovec){fups[n_out], flen};
                memset(&out[n_out], 0, sizeof(out[n_out]));
                out[n_out].msg_hdr.msg_name = &st->general_addr;
                out[n_out].msg_hdr.msg_namelen = st->addr_len;
                out[n_out].msg_hdr.msg_iov = &iov[n_out];
                out[n_out].msg_hdr.msg_iovlen = 1;
                n_out++;
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (n_out == BATCH) {
            send_general(s, out, n_out, &s->follow_ups);
            n_out = 0;
        }
    }
    send_general(s, out, n_out, &s->follow_ups);
    return n_read;
}

/* Sends the Syncs due now, at most BATCH; returns how many (BATCH: look again at once). */
static int send_syncs(SyncSender *s) {
    struct mmsghdr out[BATCH];
    struct iovec iov[BATCH];
    uint8_t msgs[BATCH][MSG_LEN + PTPAUTH_MAX];
    int32_t who[BATCH];
    int64_t slots[BATCH];
    int n = 0;
    lock_mu(s);
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    if (!s->active || !s->map_valid) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    for (int32_t index; n < BATCH && (index = take_due(s, KIND_SYNC, now, &slots[n])) >= 0; n++) {
        stream *st = &s->streams[index];
        memcpy(msgs[n], st->sync_tpl, MSG_LEN);
        iov[n] = (struct iovec){msgs[n], MSG_LEN};
        memset(&out[n], 0, sizeof(out[n]));
        out[n].msg_hdr.msg_name = &st->event_addr;
        out[n].msg_hdr.msg_namelen = st->addr_len;
        out[n].msg_hdr.msg_iov = &iov[n];
        out[n].msg_hdr.msg_iovlen = 1;
        who[n] = index;
    }
    if (n == 0) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    int64_t mono = clock_ns(CLOCK_MONOTONIC), served_now = served_ns(s, clock_ns(CLOCK_REALTIME));
    for (int i = 0; i < n; i++) {
        stream *st = &s->streams[who[i]];
        msgs[i][30] = (uint8_t)(st->seq >> 8);
        msgs[i][31] = (uint8_t)st->seq;
        put_ts(msgs[i] + 34, served_now);
        iov[i].iov_len = sign(s, msgs[i], MSG_LEN);
    }
    int kept = 0;  /* a Sync that could not be signed is not sent (its slot passes, its stream goes on) */
    for (int i = 0; i < n; i++) {
        if (!iov[i].iov_len) { s->send_errors++; continue; }
        if (kept != i) {
            memcpy(msgs[kept], msgs[i], iov[i].iov_len);
            iov[kept] = (struct iovec){msgs[kept], iov[i].iov_len};
            out[kept] = out[i];
            out[kept].msg_hdr.msg_iov = &iov[kept];
            who[kept] = who[i];
            slots[kept] = slots[i];
        }
        kept++;
    }
    n = kept;
    for (int done = 0; done < n;) {
        int k = sendmmsg(s->event_fd, out + done, (unsigned)(n - done), 0);
        if (k <= 0) {  /* this one was not sent: no OPT_ID was used for it; its sequenceId is used by the next */
            s->send_errors++;
            done++;
            continue;
        }
        int64_t held_sent = held_now(s, clock_ns(CLOCK_MONOTONIC));
        for (int i = done; i < done + k; i++) {
            stream *st = &s->streams[who[i]];
            pending *p = &s->ring[s->next_id % RING];
            if (p->valid) s->ts_lost++;
            else s->awaited++;
            *p = (pending){who[i], st->gen, st->seq, 1, served_now - (mono - slots[i]), mono,
                           held_sent - held_at(s, slots[i]), mono - slots[i],
                           slots[i] >= s->woke_due_ns && slots[i] < s->woke_at_ns ? s->woke_at_ns - slots[i] : 0};
            s->next_id++;
            st->seq++;
            st->sent++;
            s->syncs++;
        }
        done += k;
    }
    s->batches++;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Sends at most ``limit`` of the Announces due now (they carry no timestamp; Syncs go first); returns how many. */
static int send_announces(SyncSender *s, int limit) {
    struct mmsghdr out[BATCH];
    struct iovec iov[BATCH];
    static __thread uint8_t msgs[BATCH][ANNOUNCE_MAX + PTPAUTH_MAX];
    int n = 0;
    int64_t slot;
    if (limit > BATCH) limit = BATCH;
    lock_mu(s);
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    if (!s->active || !s->map_valid) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    int64_t served_now = served_ns(s, clock_ns(CLOCK_REALTIME));
    for (int32_t index; n < limit && (index = take_due(s, KIND_ANNOUNCE, now, &slot)) >= 0;) {
        stream *st = &s->streams[index];
        int len = s->announce_len[st->log_index];
        if (len == 0) continue;  /* nothing to say at this interval yet */
        memcpy(msgs[n], s->announce_tpl[st->log_index], (size_t)len);
        msgs[n][30] = (uint8_t)(st->seq >> 8);
        msgs[n][31] = (uint8_t)st->seq;
        put_ts(msgs[n] + 34, served_now);
        size_t alen = sign(s, msgs[n], (size_t)len);
        if (!alen) continue;
        st->seq++;
        st->sent++;
        iov[n] = (struct iovec){msgs[n], alen};
        memset(&out[n], 0, sizeof(out[n]));
        out[n].msg_hdr.msg_name = &st->general_addr;
        out[n].msg_hdr.msg_namelen = st->addr_len;
        out[n].msg_hdr.msg_iov = &iov[n];
        out[n].msg_hdr.msg_iovlen = 1;
        n++;
    }
    pthread_mutex_unlock(&s->mu);
    send_general(s, out, n, &s->announces);
    return n;
}

/* Timestamps that never came (a full error queue drops them): forgotten after TS_LOST_NS, oldest first. */
static void forget_lost(SyncSender *s, int64_t now) {
    if (s->next_id - s->oldest_id > RING) s->oldest_id = s->next_id - RING;
    while (s->oldest_id != s->next_id) {
        pending *p = &s->ring[s->oldest_id % RING];
        if (p->valid) {
            if (now - p->sent_mono_ns < TS_LOST_NS) break;
            p->valid = 0;
            s->awaited--;
            s->ts_lost++;
        }
        s->oldest_id++;
    }
}

static void *run(void *arg) {
    SyncSender *s = arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    s->stretch_mono_ns = clock_ns(CLOCK_MONOTONIC);
    s->stretch_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    while (__atomic_load_n(&s->running, __ATOMIC_ACQUIRE)) {
        int64_t mark = clock_ns(CLOCK_MONOTONIC), mark_held = held_now(s, mark), mark_lock = s->lock_wait_total_ns;
        s->marks[s->n_marks++ % HELD_MARKS] = (held_mark){mark, mark_held};
        /* Due Syncs first, every time round; the rest in small bites, so that a Sync never waits behind much. */
        int sent = 0, k, f, a;
        while ((k = send_syncs(s)) == BATCH) sent += k;
        f = read_timestamps(s, BITE);
        a = send_announces(s, BITE);
        int q = answer_delay_reqs(s, BITE);
        sent += k + f + a + q;
        int64_t end = clock_ns(CLOCK_MONOTONIC), round_cpu = (end - mark) - (held_now(s, end) - mark_held);
        if (round_cpu > LATE_NS) {
            lock_mu(s);
            s->long_rounds++;
            if (round_cpu > s->long_round_cpu_max_ns) {
                s->long_round_cpu_max_ns = round_cpu;
                s->long_round_packets = sent;
                s->long_round_lock_ns = s->lock_wait_total_ns - mark_lock;
            }
            pthread_mutex_unlock(&s->mu);
        }
        if (f == BITE || a == BITE || q == BITE) continue;
        lock_mu(s);
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        forget_lost(s, now);
        int64_t due = -1;
        if (s->active && s->map_valid) {
            int64_t sync = next_slot(s, KIND_SYNC), announce = next_slot(s, KIND_ANNOUNCE);
            due = sync < 0 ? announce : announce < 0 ? sync : (sync < announce ? sync : announce);
        }
        int64_t wait = due < 0 ? 100 * 1000000LL : due - now;
        if (s->awaited > 0 && wait > TX_WAIT_NS) wait = TX_WAIT_NS;
        pthread_mutex_unlock(&s->mu);
        if (wait <= 0) continue;
        /* POLLERR: a timestamp; POLLIN: a Delay_Req */
        struct pollfd fds[2] = {{s->event_fd, __atomic_load_n(&s->delay_on, __ATOMIC_ACQUIRE) ? POLLIN : 0, 0},
                                {s->wake_fd, POLLIN, 0}};
        struct timespec ts = {wait / NS_PER_S, wait % NS_PER_S};
        int64_t before = clock_ns(CLOCK_MONOTONIC);
        s->held_total_ns = held_now(s, before);  /* the stretch ends: waiting is not held time */
        s->marks[s->n_marks++ % HELD_MARKS] = (held_mark){before, s->held_total_ns};
        int r = ppoll(fds, 2, &ts, NULL);
        s->stretch_mono_ns = clock_ns(CLOCK_MONOTONIC);
        s->stretch_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        if (r == 0 && due >= 0) {  /* woke for a slot: how late the scheduler let it run */
            int64_t late = clock_ns(CLOCK_MONOTONIC) - due;
            s->woke_due_ns = due;
            s->woke_at_ns = due + late;
            lock_mu(s);
            if (late > LATE_NS) s->wakes_over_1ms++;
            if (late > s->wake_max_ns) s->wake_max_ns = late;
            pthread_mutex_unlock(&s->mu);
        }
        if (r > 0 && (fds[1].revents & POLLIN)) {
            uint64_t v;
            if (read(s->wake_fd, &v, sizeof(v)) < 0) { /* another wake-up read it */ }
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------------ Python side */

static void wake(SyncSender *s) {
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof(one)) < 0) { /* the counter is already non-zero */ }
}

static int parse_address(PyObject *addr, int port, struct sockaddr_storage *out, socklen_t *len) {
    const char *host;
    int given_port = 0;
    unsigned int flow = 0, scope = 0;
    if (!PyArg_ParseTuple(addr, "si|II", &host, &given_port, &flow, &scope)) return -1;
    memset(out, 0, sizeof(*out));
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof(*v4);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        v6->sin6_scope_id = scope;
        *len = sizeof(*v6);
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "not an IP address: %s", host);
    return -1;
}

static PyObject *ss_set_map(SyncSender *s, PyObject *args) {
    int valid;
    long long host, served;
    double rate;
    if (!PyArg_ParseTuple(args, "pLLd", &valid, &host, &served, &rate)) return NULL;
    pthread_mutex_lock(&s->mu);
    s->map_valid = valid, s->host_anchor_ns = host, s->served_anchor_ns = served, s->rate_ppb = rate;
    pthread_mutex_unlock(&s->mu);
    wake(s);
    Py_RETURN_NONE;
}

static PyObject *ss_set_active(SyncSender *s, PyObject *args) {
    int active;
    if (!PyArg_ParseTuple(args, "p", &active)) return NULL;
    pthread_mutex_lock(&s->mu);
    int was = s->active;
    s->active = active;
    pthread_mutex_unlock(&s->mu);
    if (active && !was) wake(s);
    Py_RETURN_NONE;
}

/* add(address, sync_template, follow_up_template, step_ns, first_slot_ns, first_seq) -> index: a Sync stream.
 * add(address, None, log_interval, step_ns, first_slot_ns, first_seq) -> index: an Announce stream, sending the
 * Announce template set for log_interval (set_announce) to the general port. */
static PyObject *ss_add(SyncSender *s, PyObject *args) {
    PyObject *addr, *first_arg, *second_arg;
    Py_buffer sync_tpl = {0}, fup_tpl = {0};
    long long step, first;
    int seq, kind = KIND_SYNC, log_index = 0;
    if (!PyArg_ParseTuple(args, "OOOLLi", &addr, &first_arg, &second_arg, &step, &first, &seq)) return NULL;
    struct sockaddr_storage ev, ge;
    socklen_t len = 0;
    PyObject *result = NULL;
    if (first_arg == Py_None) {
        long log = PyLong_AsLong(second_arg);
        if (log == -1 && PyErr_Occurred()) return NULL;
        if (log < -8 || log > 7) {
            PyErr_SetString(PyExc_ValueError, "an Announce log interval must be -8..7");
            return NULL;
        }
        kind = KIND_ANNOUNCE;
        log_index = (int)log + 8;
    } else {
        if (PyObject_GetBuffer(first_arg, &sync_tpl, PyBUF_SIMPLE) < 0) return NULL;
        if (PyObject_GetBuffer(second_arg, &fup_tpl, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&sync_tpl);
            return NULL;
        }
        if (sync_tpl.len != MSG_LEN || fup_tpl.len != MSG_LEN) {
            PyErr_SetString(PyExc_ValueError, "templates must be 44-octet Sync and Follow_Up messages");
            goto done;
        }
    }
    if (step <= 0) {
        PyErr_SetString(PyExc_ValueError, "step must be > 0");
        goto done;
    }
    if (parse_address(addr, s->event_port, &ev, &len) < 0 || parse_address(addr, s->general_port, &ge, &len) < 0)
        goto done;
    pthread_mutex_lock(&s->mu);
    int32_t index = -1;
    if (s->n_used < s->n_streams)  /* a free slot below n_streams: from the last one freed on */
        for (int32_t k = 0, i = s->free_hint; k < s->n_streams; k++, i = (i + 1) % s->n_streams)
            if (!s->streams[i].used) { index = i; break; }
    if (index < 0) {
        if (s->n_streams == s->cap_streams) {
            int32_t cap = s->cap_streams ? s->cap_streams * 2 : 256;
            stream *grown = realloc(s->streams, (size_t)cap * sizeof(*grown));
            if (grown == NULL) {
                pthread_mutex_unlock(&s->mu);
                PyErr_NoMemory();
                goto done;
            }
            s->streams = grown;
            s->cap_streams = cap;
        }
        index = s->n_streams++;
        s->streams[index].gen = 0;
    }
    stream *st = &s->streams[index];
    s->n_used++;
    uint32_t gen = st->gen + 1;
    memset(st, 0, sizeof(*st));
    st->used = 1;
    st->gen = gen;
    st->event_addr = ev;
    st->general_addr = ge;
    st->addr_len = len;
    st->kind = kind;
    st->log_index = log_index;
    if (kind == KIND_SYNC) {
        memcpy(st->sync_tpl, sync_tpl.buf, MSG_LEN);
        memcpy(st->fup_tpl, fup_tpl.buf, MSG_LEN);
    }
    st->step_ns = step;
    st->next_slot_ns = first;
    st->seq = (uint16_t)seq;
    int pushed = heap_push(&s->heaps[kind], first, index, gen);
    pthread_mutex_unlock(&s->mu);
    if (pushed < 0) {
        PyErr_NoMemory();
        goto done;
    }
    wake(s);
    result = PyLong_FromLong(index);
done:
    if (sync_tpl.obj) PyBuffer_Release(&sync_tpl);
    if (fup_tpl.obj) PyBuffer_Release(&fup_tpl);
    return result;
}

/* set_announce(log_interval, template): what Announce streams of that interval send from now on (sequenceId and
 * originTimestamp filled in per message). */
static PyObject *ss_set_announce(SyncSender *s, PyObject *args) {
    int log;
    Py_buffer tpl;
    if (!PyArg_ParseTuple(args, "iy*", &log, &tpl)) return NULL;
    if (log < -8 || log > 7 || tpl.len < MSG_LEN || tpl.len > ANNOUNCE_MAX) {
        PyBuffer_Release(&tpl);
        PyErr_Format(PyExc_ValueError, "an Announce template: log interval -8..7 and 44..%d octets", ANNOUNCE_MAX);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    memcpy(s->announce_tpl[log + 8], tpl.buf, (size_t)tpl.len);
    s->announce_len[log + 8] = (int)tpl.len;
    pthread_mutex_unlock(&s->mu);
    PyBuffer_Release(&tpl);
    Py_RETURN_NONE;
}

/* remove(index) -> (Syncs sent, next sequenceId, next slot ns) */
static PyObject *ss_remove(SyncSender *s, PyObject *args) {
    int index;
    if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
    pthread_mutex_lock(&s->mu);
    if (index < 0 || index >= s->n_streams || !s->streams[index].used) {
        pthread_mutex_unlock(&s->mu);
        PyErr_Format(PyExc_KeyError, "no stream %d", index);
        return NULL;
    }
    stream *st = &s->streams[index];
    st->used = 0;
    st->gen++;
    s->n_used--;
    s->free_hint = index;
    unsigned long long sent = st->sent;
    int seq = st->seq;
    long long slot = st->next_slot_ns;
    pthread_mutex_unlock(&s->mu);
    return Py_BuildValue("(KiL)", sent, seq, slot);
}

/* set_delay(delay_resp_template, rate_per_s, burst): answer the registered clients' Delay_Reqs from now on.  The
 * template is a 54-octet Delay_Resp the codec encoded for this port (its domain, identity, version, flags); the
 * correctionField, sequenceId, logMessageInterval, receiveTimestamp and requestingPortIdentity are filled in. */
/* set_security(spp, key_id, algorithm, secret, allow_mutable) or set_security(None): from now on every message is
   signed with this key (algorithm 1 SHA256-128, 2 SHA256, 3 AES128, 4 AES256), and a Delay_Req is answered here only
   when it carries this key's valid AUTHENTICATION TLV (the rest goes back to Python, which counts why). */
static PyObject *ss_set_security(SyncSender *s, PyObject *args) {
    ptp_auth *fresh = NULL;
    if (!(PyTuple_GET_SIZE(args) == 1 && PyTuple_GET_ITEM(args, 0) == Py_None)) {
        int spp, algorithm, allow_mutable;
        unsigned long key_id;
        const char *secret;
        Py_ssize_t len;
        if (!PyArg_ParseTuple(args, "ikiy#p", &spp, &key_id, &algorithm, &secret, &len, &allow_mutable)) return NULL;
        if (key_id > 0xFFFFFFFFul ||
            !(fresh = ptpauth_new(spp, (uint32_t)key_id, algorithm, (const uint8_t *)secret, (size_t)len,
                                  allow_mutable)))
            return PyErr_Format(PyExc_ValueError, "security: spp 0..255, a 32-bit key id, an algorithm 1..4 and a key "
                                "of its length (libcrypto may also have refused it)");
    }
    pthread_mutex_lock(&s->mu);
    ptp_auth *old = s->auth;
    s->auth = fresh;
    pthread_mutex_unlock(&s->mu);
    ptpauth_free(old);
    Py_RETURN_NONE;
}

static PyObject *ss_set_delay(SyncSender *s, PyObject *args) {
    Py_buffer tpl;
    double rate;
    int burst;
    if (!PyArg_ParseTuple(args, "y*di", &tpl, &rate, &burst)) return NULL;
    if (tpl.len != DRESP_LEN || !(rate >= 0) || !isfinite(rate) || burst < 1) {
        PyBuffer_Release(&tpl);
        PyErr_SetString(PyExc_ValueError, "a 54-octet Delay_Resp template, a rate >= 0 and a burst >= 1");
        return NULL;
    }
    handoff *ring = NULL;
    if (s->handoffs == NULL && (ring = calloc(HANDOFF_RING, sizeof(*ring))) == NULL) {
        PyBuffer_Release(&tpl);
        return PyErr_NoMemory();
    }
    pthread_mutex_lock(&s->mu);
    if (ring != NULL) s->handoffs = ring;
    memcpy(s->dresp_tpl, tpl.buf, DRESP_LEN);
    memcpy(s->own_clock, s->dresp_tpl + 20, 8);
    s->domain = s->dresp_tpl[4];
    s->rate_per_s = rate;
    s->burst = burst;
    __atomic_store_n(&s->delay_on, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
    PyBuffer_Release(&tpl);
    wake(s);
    Py_RETURN_NONE;
}

static int parse_client(PyObject *args, struct sockaddr_storage *addr, client_key *key, int *log) {
    PyObject *address;
    Py_buffer port_id;
    socklen_t len;
    *log = 0;
    if (!PyArg_ParseTuple(args, "Oy*|i", &address, &port_id, log)) return -1;
    int bad = port_id.len != 10;
    if (bad) PyErr_SetString(PyExc_ValueError, "a portIdentity is 10 octets");
    else bad = parse_address(address, 0, addr, &len) < 0 || make_key(addr, port_id.buf, key) < 0;
    PyBuffer_Release(&port_id);
    if (!bad && (*log < -128 || *log > 127)) {
        PyErr_SetString(PyExc_ValueError, "a log interval must be -128..127");
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* add_client(address, port_identity, log_interval) -> index: a client whose Delay_Reqs are answered here (again:
 * its log interval changes). */
static PyObject *ss_add_client(SyncSender *s, PyObject *args) {
    struct sockaddr_storage addr;
    client_key key;
    int log, found;
    if (parse_client(args, &addr, &key, &log) < 0) return NULL;
    pthread_mutex_lock(&s->mu);
    if ((s->dslots_taken + 1) * 2 > s->cap_dslots && grow_slots(s) < 0) {
        pthread_mutex_unlock(&s->mu);
        return PyErr_NoMemory();
    }
    int32_t at = probe(s, &key, &found), index;
    if (found) {
        index = s->dslots[at] - 1;
    } else {
        if (s->n_dclients == s->cap_dclients) {
            int32_t cap = s->cap_dclients ? s->cap_dclients * 2 : 256;
            dclient *grown = realloc(s->dclients, (size_t)cap * sizeof(*grown));
            if (grown == NULL) {
                pthread_mutex_unlock(&s->mu);
                return PyErr_NoMemory();
            }
            s->dclients = grown;
            s->cap_dclients = cap;
        }
        index = -1;
        if (s->n_dused < s->n_dclients)  /* a free one below n_dclients: from the last one removed on */
            for (int32_t k = 0, i = s->dfree_hint; k < s->n_dclients; k++, i = (i + 1) % s->n_dclients)
                if (!s->dclients[i].used) { index = i; break; }
        if (index < 0) index = s->n_dclients++;
        if (s->dslots[at] == 0) s->dslots_taken++;
        s->dslots[at] = index + 1;
        s->n_dused++;
        s->dclients[index] = (dclient){.used = 1, .key = key,
                                       .bucket = {(double)s->burst, clock_ns(CLOCK_MONOTONIC)}};
    }
    s->dclients[index].log_interval = (int8_t)log;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLong(index);
}

/* remove_client(address, port_identity) -> requests answered since the last take (0 when it was not there). */
static PyObject *ss_remove_client(SyncSender *s, PyObject *args) {
    struct sockaddr_storage addr;
    client_key key;
    int log, found = 0;
    if (parse_client(args, &addr, &key, &log) < 0) return NULL;
    unsigned long long requests = 0;
    pthread_mutex_lock(&s->mu);
    if (s->cap_dslots) {
        int32_t at = probe(s, &key, &found);
        if (found) {
            s->dfree_hint = s->dslots[at] - 1;
            dclient *d = &s->dclients[s->dfree_hint];
            requests = d->requests;
            d->used = 0;
            s->dslots[at] = -1;
            s->n_dused--;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromUnsignedLongLong(requests);
}

static PyObject *address_tuple(const struct sockaddr_storage *addr) {
    char text[INET6_ADDRSTRLEN];
    if (addr->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)addr;
        inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
        return Py_BuildValue("(si)", text, ntohs(v4->sin_port));
    }
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)addr;
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return Py_BuildValue("(siII)", text, ntohs(v6->sin6_port), ntohl(v6->sin6_flowinfo), v6->sin6_scope_id);
}

/* take_handoff() -> [(datagram, source address, receive timestamp ns or None)]: what the thread did not answer. */
static PyObject *ss_take_handoff(SyncSender *s, PyObject *noargs) {
    uint64_t v;
    if (read(s->handoff_fd, &v, sizeof(v)) < 0) { /* nothing signalled: there may still be some */ }
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (;;) {
        handoff h;
        pthread_mutex_lock(&s->mu);
        int any = s->handoffs != NULL && s->ho_head != s->ho_tail;
        if (any) h = s->handoffs[s->ho_head++ % HANDOFF_RING];
        pthread_mutex_unlock(&s->mu);
        if (!any) break;
        PyObject *addr = address_tuple(&h.addr);
        PyObject *item = addr == NULL ? NULL : h.ts_ns ? Py_BuildValue("(y#NL)", h.data, (Py_ssize_t)h.len, addr,
                                                                       (long long)h.ts_ns)
                                                       : Py_BuildValue("(y#NO)", h.data, (Py_ssize_t)h.len, addr,
                                                                       Py_None);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

/* take() -> dict of counters since the last take and the lateness histogram's non-empty bins [(bin, count)] */
static PyObject *ss_take(SyncSender *s, PyObject *noargs) {
    PyObject *bins = PyList_New(0);
    if (bins == NULL) return NULL;
    pthread_mutex_lock(&s->mu);
    uint64_t copy[N_BINS];
    memcpy(copy, s->bins, sizeof(copy));
    memset(s->bins, 0, sizeof(s->bins));
    unsigned long long count = s->late_count, over = s->late_over, syncs = s->syncs, fups = s->follow_ups,
        errors = s->send_errors, lost = s->ts_lost, batches = s->batches, announces = s->announces;
    long long max_ns = s->late_max_ns;
    s->late_count = s->late_over = s->syncs = s->follow_ups = s->send_errors = s->ts_lost = s->batches = 0;
    s->announces = 0;
    unsigned long long auth_signed = s->auth_signed, auth_failed = s->auth_failed;
    s->auth_signed = s->auth_failed = 0;
    unsigned long long wakes_over = s->wakes_over_1ms, over_held = s->late_over_held, over_woken = s->late_over_woken;
    s->late_over_woken = 0;
    long long wake_max = s->wake_max_ns, held_max = s->held_max_ns;
    long long pre_max = s->late_pre_max_ns, send_max = s->late_send_max_ns;
    s->late_pre_max_ns = s->late_send_max_ns = 0;
    unsigned long long long_rounds = s->long_rounds;
    long long long_cpu = s->long_round_cpu_max_ns;
    int long_pkts = s->long_round_packets;
    long long long_lock = s->long_round_lock_ns, lock_max = s->lock_wait_max_ns;
    s->long_round_lock_ns = s->lock_wait_max_ns = 0;
    s->long_rounds = 0;
    s->long_round_cpu_max_ns = 0;
    s->long_round_packets = 0;
    s->wakes_over_1ms = s->late_over_held = 0;
    s->wake_max_ns = s->held_max_ns = 0;
    s->late_max_ns = 0;
    int32_t streams = s->n_used;
    unsigned long awaited = s->awaited;
    unsigned long long answered = s->delay_answered, limited = s->delay_rate_limited, handed = s->handed_off,
        ho_dropped = s->handoff_dropped;
    s->delay_answered = s->delay_rate_limited = s->handed_off = s->handoff_dropped = 0;
    /* (index, requests, last seen monotonic ns) of the clients heard from: copied under the lock, made into
     * Python objects after it (the sender must not wait on the interpreter) */
    int64_t *heard = s->n_dclients ? malloc((size_t)s->n_dclients * 3 * sizeof(int64_t)) : NULL;
    int32_t n_heard = 0;
    for (int32_t i = 0; heard != NULL && i < s->n_dclients; i++) {
        dclient *d = &s->dclients[i];
        if (!d->used || !d->requests) continue;
        heard[3 * n_heard] = i, heard[3 * n_heard + 1] = (int64_t)d->requests, heard[3 * n_heard + 2] = d->last_seen_ns;
        n_heard++;
        d->requests = 0;
    }
    uint32_t n_recs = s->n_late_recs < LATE_RECS ? s->n_late_recs : LATE_RECS;
    unsigned long long recs_lost = s->n_late_recs - n_recs;
    late_rec *recs = n_recs ? malloc(n_recs * sizeof *recs) : NULL;
    if (recs == NULL) recs_lost += n_recs, n_recs = 0;
    for (uint32_t k = 0; k < n_recs; k++) recs[k] = s->late_recs[(s->n_late_recs - n_recs + k) % LATE_RECS];
    s->n_late_recs = 0;
    pthread_mutex_unlock(&s->mu);
    PyObject *seen = PyList_New(0);
    for (int32_t k = 0; seen != NULL && k < n_heard; k++) {
        PyObject *rec = Py_BuildValue("(LLL)", (long long)heard[3 * k], (long long)heard[3 * k + 1],
                                      (long long)heard[3 * k + 2]);
        if (rec == NULL || PyList_Append(seen, rec) < 0) Py_CLEAR(seen);
        Py_XDECREF(rec);
    }
    free(heard);
    PyObject *late = seen == NULL ? NULL : PyList_New(0);
    if (late == NULL) {
        free(recs);
        Py_XDECREF(seen);
        Py_DECREF(bins);
        return NULL;
    }
    for (uint32_t k = 0; k < n_recs; k++) {
        PyObject *rec = Py_BuildValue("(LLL)", (long long)recs[k].slot_mono_ns, (long long)recs[k].late_ns,
                                      (long long)recs[k].held_ns);
        if (rec == NULL || PyList_Append(late, rec) < 0) {
            free(recs);
            Py_XDECREF(rec);
            Py_DECREF(late);
            Py_DECREF(seen);
            Py_DECREF(bins);
            return NULL;
        }
        Py_DECREF(rec);
    }
    free(recs);
    for (int i = 0; i < N_BINS; i++) {
        if (!copy[i]) continue;
        PyObject *pair = Py_BuildValue("(iK)", i, (unsigned long long)copy[i]);
        if (pair == NULL || PyList_Append(bins, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(bins);
            Py_DECREF(late);
            Py_DECREF(seen);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:N,s:K,s:L,s:i,s:N,s:K,s:K,s:L,s:K,s:L,s:L,s:L,s:K,"
                         "s:K,s:K,s:K,s:K,s:K,s:K,s:L,s:N,s:K,s:i,s:k,s:O,s:K,s:L,s:L}",
                         "auth_signed", auth_signed, "auth_failed", auth_failed,
                         "delay_answered", answered, "delay_rate_limited", limited, "handed_off", handed,
                         "handoff_dropped", ho_dropped, "delay_seen", seen,
                         "long_rounds", long_rounds, "long_round_cpu_max_ns", long_cpu, "long_round_packets", long_pkts,
                         "late_syncs", late, "late_over_1ms_woken", over_woken, "wakes_over_1ms", wakes_over,
                         "wake_max_ns", wake_max, "late_over_1ms_held", over_held,
                         "held_max_ns", held_max, "late_pre_max_ns", pre_max, "late_send_max_ns", send_max,
                         "announces", announces,
                         "syncs", syncs, "follow_ups", fups,
                         "send_errors", errors, "timestamps_lost", lost, "batches", batches, "late_count", count,
                         "late_max_ns", max_ns, "late_bins", bins, "late_over_1ms", over, "streams", (int)streams,
                         "awaited", awaited, "realtime", s->realtime ? Py_True : Py_False, "late_syncs_lost", recs_lost,
                         "long_round_lock_ns", long_lock, "lock_wait_max_ns", lock_max);
}

static PyObject *ss_close(SyncSender *s, PyObject *noargs) {
    if (s->started) {
        __atomic_store_n(&s->running, 0, __ATOMIC_RELEASE);
        wake(s);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(s->thread, NULL);
        Py_END_ALLOW_THREADS
        s->started = 0;
    }
    Py_RETURN_NONE;
}

/* SyncSender(event_fd, general_fd, realtime_priority=0, event_port=319, general_port=320): the thread starts at
 * once, inactive and without a map.  realtime_priority > 0 asks for SCHED_FIFO at that priority (granted to root);
 * 0 leaves the thread as it is.  Clients are sent to at the two ports whatever port they sent from, as the port
 * itself does. */
static int ss_init(SyncSender *s, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"event_fd", "general_fd", "realtime_priority", "event_port", "general_port", NULL};
    int event_fd, general_fd, prio = 0, event_port = 319, general_port = 320;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ii|iii", kw, &event_fd, &general_fd, &prio, &event_port,
                                     &general_port))
        return -1;
    if (event_port <= 0 || event_port > 65535 || general_port <= 0 || general_port > 65535) {
        PyErr_SetString(PyExc_ValueError, "ports must be 1..65535");
        return -1;
    }
    if (s->started) {
        PyErr_SetString(PyExc_RuntimeError, "already started");
        return -1;
    }
    s->event_fd = event_fd;
    s->general_fd = general_fd;
    s->event_port = event_port;
    s->general_port = general_port;
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->handoff_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0 || s->handoff_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    /* Priority inheritance: the interpreter's thread holding the lock runs at the sender's priority until it lets
     * go, so no other thread of the host can keep the sender waiting behind it. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT);
    pthread_mutex_init(&s->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    s->running = 1;
    int err = pthread_create(&s->thread, NULL, run, s);
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    s->started = 1;
    pthread_setname_np(s->thread, "ptp-sync");  /* as top -H and /proc/<pid>/task/<tid>/comm show it */
    if (prio > 0) {
        struct sched_param sp = {.sched_priority = prio};
        s->realtime = pthread_setschedparam(s->thread, SCHED_FIFO, &sp) == 0;
    }
    return 0;
}

static void ss_dealloc(SyncSender *s) {
    ss_close(s, NULL);
    ptpauth_free(s->auth);
    if (s->wake_fd > 0) close(s->wake_fd);
    if (s->handoff_fd > 0) close(s->handoff_fd);
    free(s->dclients);
    free(s->dslots);
    free(s->handoffs);
    free(s->streams);
    free(s->heaps[0].items);
    free(s->heaps[1].items);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *ss_handoff_fd(SyncSender *s, PyObject *noargs) {
    return PyLong_FromLong(s->handoff_fd);
}

static PyMethodDef ss_methods[] = {
    {"set_map", (PyCFunction)ss_set_map, METH_VARARGS, "set_map(valid, host_anchor_ns, served_anchor_tai_ns, rate_ppb)"},
    {"set_active", (PyCFunction)ss_set_active, METH_VARARGS, "set_active(bool): Syncs go out only while active"},
    {"add", (PyCFunction)ss_add, METH_VARARGS,
     "add(address, sync_template, follow_up_template, step_ns, first_slot_ns, first_seq) -> index (a Sync stream); "
     "add(address, None, log_interval, step_ns, first_slot_ns, first_seq) -> index (an Announce stream)"},
    {"set_announce", (PyCFunction)ss_set_announce, METH_VARARGS, "set_announce(log_interval, template)"},
    {"remove", (PyCFunction)ss_remove, METH_VARARGS, "remove(index) -> (sent, next_seq, next_slot_ns)"},
    {"take", (PyCFunction)ss_take, METH_NOARGS, "counters and lateness bins since the last take"},
    {"set_delay", (PyCFunction)ss_set_delay, METH_VARARGS, "set_delay(delay_resp_template, rate_per_s, burst)"},
    {"set_security", (PyCFunction)ss_set_security, METH_VARARGS,
     "set_security(spp, key_id, algorithm, secret, allow_mutable) or set_security(None): sign what is sent"},
    {"add_client", (PyCFunction)ss_add_client, METH_VARARGS, "add_client(address, port_identity, log_interval)"},
    {"remove_client", (PyCFunction)ss_remove_client, METH_VARARGS, "remove_client(address, port_identity)"},
    {"take_handoff", (PyCFunction)ss_take_handoff, METH_NOARGS, "[(datagram, address, rx_ns or None)] not answered"},
    {"handoff_fd", (PyCFunction)ss_handoff_fd, METH_NOARGS, "the eventfd readable when take_handoff has some"},
    {"close", (PyCFunction)ss_close, METH_NOARGS, "stop the thread (the sockets stay the caller's)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SyncSenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.edge.ptp._syncsend.SyncSender",
    .tp_basicsize = sizeof(SyncSender),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ss_init,
    .tp_dealloc = (destructor)ss_dealloc,
    .tp_methods = ss_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_syncsend", "native Sync sender", -1, NULL};

PyMODINIT_FUNC PyInit__syncsend(void) {
    if (PyType_Ready(&SyncSenderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&SyncSenderType);
    if (PyModule_AddObject(m, "SyncSender", (PyObject *)&SyncSenderType) < 0) {
        Py_DECREF(&SyncSenderType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "N_BINS", N_BINS);
    return m;
}
