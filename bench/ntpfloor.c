/*
 * ntpfloor: the least an NTP server on the Linux socket API does per reply, as a reference for bench/ntp_cost.py.
 *
 *     ntpfloor PORT        (binds 127.0.0.1:PORT, runs until killed)
 *
 * One UDP socket with kernel receive timestamps (SO_TIMESTAMPING, software), a blocking recvmmsg that waits for
 * the first datagram of up to 64, a mode-4 reply made from each 48-octet request (its transmit timestamp as origin,
 * the kernel's receive timestamp, a transmit timestamp read before the send), one sendmmsg.  No access list, no
 * rate limit, no clock map, no keys, no interleaved mode: it is not a server, only the cost of the system calls
 * and of the kernel's UDP path that any server answering the same load pays.  What a server costs above it is
 * what its own decisions and its own way of using the kernel cost.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 64
#define NTP_UNIX_OFFSET_S 2208988800ULL

static void put_ntp(uint8_t *p, int64_t sec, int64_t nsec) {
    uint64_t v = ((uint64_t)(sec + NTP_UNIX_OFFSET_S) << 32) | (uint64_t)(((uint64_t)nsec << 32) / 1000000000ULL);
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: ntpfloor PORT\n"); return 2; }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int flags = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof(flags)) < 0
        || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        perror("ntpfloor");
        return 1;
    }
    static uint8_t bufs[BATCH][64];
    static char ctrls[BATCH][256];
    static struct sockaddr_in from[BATCH];
    struct mmsghdr in[BATCH], out[BATCH];
    struct iovec iov[BATCH], out_iov[BATCH];
    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            iov[i] = (struct iovec){bufs[i], sizeof(bufs[i])};
            in[i].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof(from[i]), .msg_iov = &iov[i],
                                            .msg_iovlen = 1, .msg_control = ctrls[i],
                                            .msg_controllen = sizeof(ctrls[i])};
        }
        int n = recvmmsg(fd, in, BATCH, MSG_WAITFORONE, NULL);
        if (n <= 0) continue;
        struct timespec tx;
        clock_gettime(CLOCK_REALTIME, &tx);
        int m = 0;
        for (int i = 0; i < n; i++) {
            uint8_t *p = bufs[i];
            if (in[i].msg_len < 48 || (p[0] & 7) != 3) continue;
            struct timespec rx = tx;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&in[i].msg_hdr); c; c = CMSG_NXTHDR(&in[i].msg_hdr, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING)
                    memcpy(&rx, CMSG_DATA(c), sizeof(rx));
            memcpy(p + 24, p + 40, 8);  /* origin: the request's transmit timestamp */
            p[0] = (uint8_t)((p[0] & 0x38) | 4);
            p[1] = 1;
            memcpy(p + 12, "GPS\0", 4);
            put_ntp(p + 16, tx.tv_sec, 0);
            put_ntp(p + 32, rx.tv_sec, rx.tv_nsec);
            put_ntp(p + 40, tx.tv_sec, tx.tv_nsec);
            out_iov[m] = (struct iovec){p, 48};
            out[m].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = in[i].msg_hdr.msg_namelen,
                                             .msg_iov = &out_iov[m], .msg_iovlen = 1};
            m++;
        }
        for (int sent = 0; sent < m;) {
            int k = sendmmsg(fd, out + sent, m - sent, 0);
            sent += k > 0 ? k : 1;
        }
    }
}
