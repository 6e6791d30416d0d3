/*
 * kstamp.h: the kernel's software timestamps on a socket (SO_TIMESTAMPING), read the one way every native path
 * reads them: the receive timestamp a datagram carries, and a transmit timestamp with the datagram's number
 * (SOF_TIMESTAMPING_OPT_ID) read back from the socket's error queue.  The NTP data plane and the PTP event sender
 * include it.
 */
#ifndef APPLIANCE_KSTAMP_H
#define APPLIANCE_KSTAMP_H

#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* The software timestamp of a received message, CLOCK_REALTIME ns (0: none). */
static inline int64_t ks_timestamp_ns(struct msghdr *mh) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING) {
            struct timespec ts[3];
            memcpy(ts, CMSG_DATA(c), sizeof(ts));
            return (int64_t)ts[0].tv_sec * 1000000000LL + ts[0].tv_nsec;
        }
    }
    return 0;
}

/* One message from fd's error queue: -1 when the queue is empty; else 1 with *tx_ns and *id set when it is a
   transmit timestamp with its datagram's number, 0 when it is something else. */
static inline int ks_read_tx(int fd, int64_t *tx_ns, uint32_t *id) {
    char ctrl[512], data[64];
    struct iovec iov = {data, sizeof(data)};
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctrl;
    mh.msg_controllen = sizeof(ctrl);
    if (recvmsg(fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return -1;
    int has_id = 0;
    *tx_ns = ks_timestamp_ns(&mh);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if ((c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
            (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR)) {
            struct sock_extended_err ee;
            memcpy(&ee, CMSG_DATA(c), sizeof(ee));
            if (ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING) { has_id = 1; *id = ee.ee_data; }
        }
    }
    return has_id && *tx_ns != 0;
}

#endif
