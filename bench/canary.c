/* A reference for how fast one vCPU runs, measured in the same run as what it judges (bench/ptp_unicast.py
 * --canary).  Pinned to one CPU at SCHED_FIFO above the thread it judges, it wakes every period on CLOCK_MONOTONIC
 * and runs a fixed piece of work (the same instructions every time: a pseudo-random walk writing over a buffer the
 * size of a private L2 cache), and records when it was due, when it woke, and the wall and thread-CPU time the work
 * took.  Work that takes several times its median wall time while the thread ran it (its CPU time growing with it)
 * is the vCPU itself running slow (the host's cache or core contention, exits the steal clock does not see); the
 * same work would have run at its usual speed had only the guest's threads been competing for it.
 *
 *     canary CPU PRIORITY PERIOD_US WORK_US OUT
 *
 * Calibrates the work to about WORK_US (median of 201 runs) before the first period, then runs until SIGTERM or
 * SIGINT and writes OUT: a header line "canary <iterations> <records>" and then one line per wake-up:
 * "<due_mono_ns> <woke_mono_ns> <work_wall_ns> <work_cpu_ns>".  At most MAX_RECORDS wake-ups are kept (the
 * earliest).  Needs CAP_SYS_NICE for SCHED_FIFO; says so and exits 2 without it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

#define MAX_RECORDS (1 << 20)
#define BUF_WORDS (256 * 1024 / 8)

typedef struct { int64_t due, woke, wall, cpu; } record;

static volatile sig_atomic_t stop;
uint64_t canary_buf[BUF_WORDS];  /* external: its writes are never optimised away */

static void on_signal(int sig) { (void)sig; stop = 1; }

static int64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t work(long iterations, uint64_t x) {
    for (long i = 0; i < iterations; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        canary_buf[x % BUF_WORDS] += x;
    }
    return x;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: canary CPU PRIORITY PERIOD_US WORK_US OUT\n");
        return 2;
    }
    int cpu = atoi(argv[1]), prio = atoi(argv[2]);
    long period_ns = atol(argv[3]) * 1000L, work_ns = atol(argv[4]) * 1000L;
    if (cpu < 0 || prio < 1 || prio > 99 || period_ns <= 0 || work_ns <= 0 || work_ns >= period_ns) {
        fprintf(stderr, "canary: CPU >= 0, PRIORITY 1..99, 0 < WORK_US < PERIOD_US\n");
        return 2;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        fprintf(stderr, "canary: CPU %d: %s\n", cpu, strerror(errno));
        return 2;
    }
    struct sched_param sp = {.sched_priority = prio};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
        fprintf(stderr, "canary: SCHED_FIFO %d: %s\n", prio, strerror(errno));
        return 2;
    }
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    record *recs = calloc(MAX_RECORDS, sizeof *recs);
    if (recs == NULL || mlockall(MCL_CURRENT) != 0) {
        fprintf(stderr, "canary: memory: %s\n", strerror(errno));
        return 2;
    }
    /* calibration: iterations for about work_ns, from the median of 201 timed runs */
    uint64_t x = 88172645463325252ULL;
    long iterations = 1000;
    int64_t times[201];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 201; i++) {
            int64_t t0 = now_ns(CLOCK_MONOTONIC);
            x = work(iterations, x);
            times[i] = now_ns(CLOCK_MONOTONIC) - t0;
        }
        qsort(times, 201, sizeof times[0], cmp64);
        if (times[100] > 0) iterations = (long)((double)iterations * work_ns / times[100]);
        if (iterations < 1) iterations = 1;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    long n = 0;
    int64_t due = now_ns(CLOCK_MONOTONIC) + period_ns;
    while (!stop) {
        struct timespec ts = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000};
        int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        if (rc == EINTR) continue;
        int64_t woke = now_ns(CLOCK_MONOTONIC), cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        x = work(iterations, x);
        int64_t end = now_ns(CLOCK_MONOTONIC), cpu1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        if (n < MAX_RECORDS) recs[n++] = (record){due, woke, end - woke, cpu1 - cpu0};
        due += period_ns;
        if (due < end) due = end + period_ns - (end - due) % period_ns;  /* periods missed are skipped */
    }
    FILE *f = fopen(argv[5], "w");
    if (f == NULL) {
        fprintf(stderr, "canary: %s: %s\n", argv[5], strerror(errno));
        return 1;
    }
    fprintf(f, "canary %ld %ld\n", iterations, n);
    for (long i = 0; i < n; i++)
        fprintf(f, "%lld %lld %lld %lld\n", (long long)recs[i].due, (long long)recs[i].woke,
                (long long)recs[i].wall, (long long)recs[i].cpu);
    return fclose(f) == 0 ? 0 : 1;
}
