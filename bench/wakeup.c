/* How long the kernel takes to wake a thread, the two ways the PTP Sync sender meets it (bench/cpu_latency.py):
 *
 *     wakeup timer N PERIOD_US   a SCHED_FIFO thread on CPU 0 sleeps to an absolute CLOCK_MONOTONIC instant N times,
 *                                PERIOD_US apart, and prints how late each wake-up came (ns), one a line;
 *     wakeup cross N PERIOD_US   a thread on CPU 0 writes an eventfd a thread blocked on CPU 1 reads, N times,
 *                                PERIOD_US apart (the other CPU idle meanwhile), and prints how long each write took
 *                                (ns): waking a thread on an idle CPU is an interrupt to it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static int efd;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

static void *reader(void *arg) {
    (void)arg;
    pin(1);
    uint64_t v;
    while (read(efd, &v, sizeof(v)) == sizeof(v)) {}
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "timer") && strcmp(argv[1], "cross"))) {
        fprintf(stderr, "usage: wakeup timer|cross N PERIOD_US\n");
        return 2;
    }
    long n = atol(argv[2]), period_ns = atol(argv[3]) * 1000L;
    pin(0);
    if (!strcmp(argv[1], "timer")) {
        struct sched_param p = {.sched_priority = 1};
        if (sched_setscheduler(0, SCHED_FIFO, &p) != 0) perror("SCHED_FIFO (continuing without)");
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        for (long i = 0; i < n; i++) {
            t.tv_nsec += period_ns;
            while (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
            printf("%lld\n", (long long)(now_ns() - ((int64_t)t.tv_sec * 1000000000LL + t.tv_nsec)));
        }
        return 0;
    }
    efd = eventfd(0, 0);
    pthread_t th;
    pthread_create(&th, NULL, reader, NULL);
    usleep(10000);
    uint64_t one = 1;
    for (long i = 0; i < n; i++) {
        usleep((useconds_t)(period_ns / 1000));
        int64_t a = now_ns();
        if (write(efd, &one, sizeof(one)) != sizeof(one)) return 1;
        printf("%lld\n", (long long)(now_ns() - a));
    }
    return 0;
}
