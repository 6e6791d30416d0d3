/* What the NTP and NTS load generators (bench/ntpload.c, bench/ntsload.c) share: the receive batch's headers and
 * the open-loop schedule's next wake-up. */
#ifndef BENCH_LOADCOMMON_H
#define BENCH_LOADCOMMON_H
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* n receive headers over consecutive buffers of `size` octets each, for one recvmmsg */
static void rx_ready(struct mmsghdr *msgs, struct iovec *iovs, uint8_t *bufs, size_t size, int n) {
    for (int i = 0; i < n; i++) {
        iovs[i].iov_base = bufs + (size_t)i * size;
        iovs[i].iov_len = size;
        memset(&msgs[i], 0, sizeof(msgs[i]));
        msgs[i].msg_hdr.msg_iov = &iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
}

/* one send header over `len` octets of `buf` */
static void tx_ready(struct mmsghdr *msg, struct iovec *iov, uint8_t *buf, size_t len) {
    iov->iov_base = buf;
    iov->iov_len = len;
    memset(msg, 0, sizeof(*msg));
    msg->msg_hdr.msg_iov = iov;
    msg->msg_hdr.msg_iovlen = 1;
}

/* sendmmsg until all n went or the socket refuses; how many went (the rest time out and count as lost) */
static uint64_t send_all(int fd, struct mmsghdr *msgs, int n) {
    int done = 0;
    while (done < n) {
        int m = sendmmsg(fd, msgs + done, (unsigned)(n - done), 0);
        if (m <= 0) break;
        done += m;
    }
    return (uint64_t)done;
}

/* Sleep until the next burst is due (`due`: the requests offered or skipped so far), at most until `end`; once the
 * window is over (draining) a millisecond at a time. */
static void sleep_until_due(int64_t now, int64_t start, int64_t end, uint64_t due, int burst, double rate) {
    int64_t wake;
    if (now < end) {
        wake = start + (int64_t)((double)(due + (uint64_t)burst - 1) * 1e9 / rate);
        if (wake > end) wake = end;
    } else {
        wake = now + 1000000;
    }
    if (wake > now) {
        struct timespec ts = {wake / 1000000000LL, wake % 1000000000LL};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
}
#endif
