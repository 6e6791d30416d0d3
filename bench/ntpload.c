/*
 * ntpload: a closed-loop NTPv4 load generator and reply validator for the throughput benchmark.
 *
 *   ntpload -h 127.0.0.1 -p 11123 -d 5 -w 32 [-t 200]
 *   ntpload -h 127.0.0.1 -p 11123 -d 5 -r 50000 [-B 1] [-w 1024] [-t 200]
 *
 * Keeps W client requests in flight on one UDP socket: every valid reply (mode 4, origin equal to the request's
 * transmit cookie, non-zero receive and transmit timestamps) is immediately replaced by a new request (replies are
 * read up to 64 at a time and their replacements sent together with one sendmmsg, so that the generator needs far
 * less CPU per reply than the server it measures and a busy neighbour slows it less); a request
 * unanswered after the timeout counts as lost and is replaced too.  Prints one JSON line: requests sent, valid
 * replies, lost, replies per second, loss %, KoD and unsynchronized replies, and round-trip percentiles.
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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loadcommon.h"

#define MAXW 1024
#define BATCH 64
#define LATE_NS 1000000  /* -r: a request this late is not sent (the generator fell behind) */

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct { uint64_t cookie; int64_t sent_ns; int busy; } slot_t;

static slot_t slots[MAXW];
static uint64_t next_cookie = 1;  /* a cookie is (serial << 10) | slot */

static uint64_t new_cookie(int slot) { return next_cookie++ << 10 | (uint64_t)slot; }
static int64_t *rtts;
static size_t nrtt, rtt_cap;

static void fill_request(uint8_t *pkt, uint64_t cookie) {
    memset(pkt, 0, 48);
    pkt[0] = 0x23; /* LI 0, VN 4, mode 3 */
    for (int i = 0; i < 8; i++) pkt[40 + i] = (uint8_t)(cookie >> (56 - 8 * i));
}

static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* -r: a fixed offered load, `rate` requests per second in groups of `burst`, at most `window` in flight. */
static int paced(int fd, double rate, int burst, int window, double duration, int timeout_ms) {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  /* wake-ups within a microsecond of when a request is due */
    static int freelist[MAXW];
    int nfree = 0;
    for (int i = window - 1; i >= 0; i--) { slots[i].busy = 0; freelist[nfree++] = i; }
    static uint8_t bufs[BATCH][128];
    static uint8_t out[MAXW][48];
    struct mmsghdr msgs[BATCH], outmsgs[MAXW];
    struct iovec iovs[BATCH], outiovs[MAXW];
    uint64_t offered = 0, late = 0, sent = 0, skipped = 0, valid = 0, lost = 0, invalid = 0, stale = 0, kod = 0, unsync = 0;
    double cpu0 = cpu_s();
    int64_t start = mono_ns(), end = start + (int64_t)(duration * 1e9), timeout_ns = (int64_t)timeout_ms * 1000000;
    int64_t next_scan = start, drain_end = 0;
    for (;;) {
        int64_t now = mono_ns();
        if (now < end) {  /* the requests whose time has come: the first at the start, then one every 1/rate s */
            /* those due more than LATE_NS ago (past their burst's time) are not sent: after a stall of the generator
               itself they would go out all at once, a burst the server's receive buffer may not hold, which is not
               the load offered */
            int64_t late_ns = LATE_NS + (int64_t)((double)(burst - 1) * 1e9 / rate);  /* a burst waits for its last */
            uint64_t first_on_time = now - start > late_ns ? (uint64_t)((double)(now - start - late_ns) * rate / 1e9) : 0;
            if (first_on_time > offered + late) late = first_on_time - offered;
            uint64_t due = (uint64_t)((double)(now - start) * rate / 1e9) + 1 - offered - late;
            due -= due % (uint64_t)burst;
            int nout = 0;
            for (uint64_t k = 0; k < due && nout < MAXW; k++) {
                offered++;
                if (!nfree) { skipped++; continue; }
                int s = freelist[--nfree];
                slots[s].cookie = new_cookie(s);
                slots[s].sent_ns = now;
                slots[s].busy = 1;
                fill_request(out[nout], slots[s].cookie);
                tx_ready(&outmsgs[nout], &outiovs[nout], out[nout], 48);
                nout++;
            }
            sent += send_all(fd, outmsgs, nout);  /* what is not sent times out and counts as lost */
        } else if (nfree == window) {
            break;  /* every request answered or given up */
        } else if (!drain_end) {
            drain_end = now + timeout_ns;
        } else if (now >= drain_end) {
            break;
        }
        for (;;) {  /* the replies that came meanwhile */
            rx_ready(msgs, iovs, &bufs[0][0], sizeof(bufs[0]), BATCH);
            int n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
            int64_t at = mono_ns();
            for (int i = 0; i < n; i++) {
                const uint8_t *r = bufs[i];
                if (msgs[i].msg_len < 48 || (r[0] & 7) != 4) { invalid++; continue; }
                uint64_t origin = get64(r + 24);
                int s = (int)(origin & (MAXW - 1));
                if (s >= window || origin >> 10 == 0 || origin >> 10 > slots[s].cookie >> 10) { invalid++; continue; }
                if (!slots[s].busy || slots[s].cookie != origin) { stale++; continue; }
                if (!get64(r + 32) || !get64(r + 40)) { invalid++; continue; }
                if (r[1] == 0) kod++;
                else if ((r[0] >> 6) == 3) unsync++;
                valid++;
                if (nrtt < rtt_cap) rtts[nrtt++] = at - slots[s].sent_ns;
                slots[s].busy = 0;
                freelist[nfree++] = s;
            }
            if (n < BATCH) break;
        }
        now = mono_ns();
        if (now >= next_scan || drain_end) {  /* requests unanswered after the timeout are lost */
            for (int k = 0; k < window; k++) {
                if (slots[k].busy && now - slots[k].sent_ns > timeout_ns) {
                    lost++;
                    slots[k].busy = 0;
                    freelist[nfree++] = k;
                }
            }
            next_scan = now + 10000000;
        }
        sleep_until_due(now, start, end, offered + late, burst, rate);
    }
    double elapsed = (double)(end - start) / 1e9, cpu = cpu_s() - cpu0;
    qsort(rtts, nrtt, sizeof(int64_t), cmp64);
    double p50 = nrtt ? rtts[nrtt / 2] / 1e3 : 0, p99 = nrtt ? rtts[nrtt * 99 / 100] / 1e3 : 0;
    printf("{\"rate\":%.1f,\"burst\":%d,\"window\":%d,\"seconds\":%.3f,\"offered\":%llu,\"late\":%llu,\"sent\":%llu,\"skipped\":%llu,"
           "\"valid\":%llu,\"lost\":%llu,\"invalid\":%llu,\"stale\":%llu,\"kod\":%llu,\"unsync\":%llu,"
           "\"replies_per_s\":%.1f,\"loss_pct\":%.4f,\"rtt_us_p50\":%.1f,\"rtt_us_p99\":%.1f,\"load_cpu_pct\":%.1f}\n",
           rate, burst, window, elapsed, (unsigned long long)offered, (unsigned long long)late, (unsigned long long)sent,
           (unsigned long long)skipped, (unsigned long long)valid, (unsigned long long)lost,
           (unsigned long long)invalid, (unsigned long long)stale, (unsigned long long)kod,
           (unsigned long long)unsync, valid / elapsed,
           offered ? 100.0 * (double)(offered - valid) / (double)offered : 0.0, p50, p99,
           100.0 * cpu / ((double)(mono_ns() - start) / 1e9));
    return 0;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 123, window = 32, timeout_ms = 200, burst = 1, window_set = 0;
    double duration = 5.0, rate = 0;
    int opt;
    while ((opt = getopt(argc, argv, "h:p:d:w:t:r:B:")) != -1) {
        switch (opt) {
            case 'h': host = optarg; break;
            case 'p': port = atoi(optarg); break;
            case 'd': duration = atof(optarg); break;
            case 'w': window = atoi(optarg); window_set = 1; break;
            case 't': timeout_ms = atoi(optarg); break;
            case 'r': rate = atof(optarg); break;
            case 'B': burst = atoi(optarg); break;
            default:
                fprintf(stderr, "usage: %s -h HOST -p PORT -d SECONDS (-w WINDOW | -r RATE [-B BURST] [-w MAX_IN_FLIGHT])"
                        " [-t TIMEOUT_MS]\n", argv[0]);
                return 2;
        }
    }
    if (rate > 0 && !window_set) window = MAXW;
    if (rate < 0 || burst < 1 || burst > MAXW) { fprintf(stderr, "rate must be > 0, burst 1..%d\n", MAXW); return 2; }
    if (window < 1 || window > MAXW) { fprintf(stderr, "window must be 1..%d\n", MAXW); return 2; }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        perror("ntpload: socket");
        return 1;
    }
    int buf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    rtt_cap = 1 << 20;
    rtts = malloc(rtt_cap * sizeof(int64_t));
    if (rate > 0) return paced(fd, rate, burst, window, duration, timeout_ms);
    uint64_t sent = 0, valid = 0, lost = 0, invalid = 0, kod = 0, unsync = 0;
    uint8_t pkt[48];
    int64_t start = mono_ns(), end = start + (int64_t)(duration * 1e9), timeout_ns = (int64_t)timeout_ms * 1000000;
    for (int i = 0; i < window; i++) {
        slots[i].cookie = new_cookie(i);
        fill_request(pkt, slots[i].cookie);
        slots[i].sent_ns = mono_ns();
        slots[i].busy = 1;
        if (send(fd, pkt, 48, 0) == 48) sent++;
    }
    static uint8_t bufs[BATCH][128];
    static uint8_t out[MAXW][48];
    struct mmsghdr msgs[BATCH], outmsgs[MAXW];
    struct iovec iovs[BATCH], outiovs[MAXW];
    int nout = 0, full = 0;
    while (mono_ns() < end) {
        if (!full) {  /* a full batch means more may be waiting: read again before sleeping */
            struct pollfd p = {fd, POLLIN, 0};
            poll(&p, 1, 10);
        }
        rx_ready(msgs, iovs, &bufs[0][0], sizeof(bufs[0]), BATCH);
        int n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
        full = n == BATCH;
        int64_t now = mono_ns();
        for (int i = 0; i < n; i++) {
            const uint8_t *r = bufs[i];
            if (msgs[i].msg_len < 48 || (r[0] & 7) != 4) { invalid++; continue; }
            uint64_t origin = get64(r + 24);
            int s = (int)(origin & (MAXW - 1));  /* cookies carry their slot in the low bits */
            if (s >= window || slots[s].cookie != origin || !get64(r + 32) || !get64(r + 40)) { invalid++; continue; }
            if (r[1] == 0) kod++;
            else if ((r[0] >> 6) == 3) unsync++;
            valid++;
            if (nrtt < rtt_cap) rtts[nrtt++] = now - slots[s].sent_ns;
            slots[s].cookie = new_cookie(s);
            fill_request(out[nout++], slots[s].cookie);  /* its replacement goes out with the batch's others */
            slots[s].sent_ns = now;
        }
        if (nout) {  /* one system call for the batch's replacements (fewer CPU cycles per reply than the server) */
            for (int i = 0; i < nout; i++) {
                outiovs[i].iov_base = out[i];
                outiovs[i].iov_len = 48;
                memset(&outmsgs[i], 0, sizeof(outmsgs[i]));
                outmsgs[i].msg_hdr.msg_iov = &outiovs[i];
                outmsgs[i].msg_hdr.msg_iovlen = 1;
            }
            int m = sendmmsg(fd, outmsgs, (unsigned)nout, 0);
            if (m > 0) sent += (uint64_t)m;
            nout = 0;
        }
        for (int k = 0; k < window; k++) {
            if (slots[k].busy && now - slots[k].sent_ns > timeout_ns) {
                lost++;
                slots[k].cookie = new_cookie(k);
                fill_request(pkt, slots[k].cookie);
                slots[k].sent_ns = mono_ns();
                if (send(fd, pkt, 48, 0) == 48) sent++;
            }
        }
    }
    double elapsed = (mono_ns() - start) / 1e9;
    qsort(rtts, nrtt, sizeof(int64_t), cmp64);
    double p50 = nrtt ? rtts[nrtt / 2] / 1e3 : 0, p99 = nrtt ? rtts[nrtt * 99 / 100] / 1e3 : 0;
    /* requests still in flight at the end are neither valid nor lost */
    uint64_t answered_or_lost = valid + lost;
    printf("{\"window\":%d,\"seconds\":%.3f,\"sent\":%llu,\"valid\":%llu,\"lost\":%llu,\"invalid\":%llu,\"kod\":%llu,"
           "\"unsync\":%llu,\"replies_per_s\":%.1f,\"loss_pct\":%.4f,\"rtt_us_p50\":%.1f,\"rtt_us_p99\":%.1f}\n",
           window, elapsed, (unsigned long long)sent, (unsigned long long)valid, (unsigned long long)lost,
           (unsigned long long)invalid, (unsigned long long)kod, (unsigned long long)unsync, valid / elapsed,
           answered_or_lost ? 100.0 * lost / answered_or_lost : 0.0, p50, p99);
    return 0;
}
