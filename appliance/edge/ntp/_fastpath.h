/*
 * _fastpath.h: the NTP data plane's shared definitions: its limits, counters, state (one FastPath per worker
 * socket) and reply, and the decision functions _decide.c gives _fastpath.c (the I/O loop and the Python type).
 * See _fastpath.c for what the data plane does.
 */
#ifndef APPLIANCE_FASTPATH_H
#define APPLIANCE_FASTPATH_H

#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <math.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "_auth.h"
#include "_nts.h"
#include "bucket.h"
#include "clockmap.h"
#include "kstamp.h"

#define BATCH 64
#define RECV_SIZE 1100
#define HEADER_LEN 48
#define MAX_REQUEST_LEN 1024
#define SEQ_OFFSET 8
#define MAP_OFFSET 16
#define NS_PER_S 1000000000LL
#define NTP_UNIX_OFFSET_NS (2208988800LL * NS_PER_S)
#define KOD_INTERVAL_NS NS_PER_S
#define TX_RING 4096
#ifndef SEND_CHUNK
#define SEND_CHUNK 16  /* replies sent together at most */
#endif

/* Counter slots: the order of COUNTER_NAMES in shm.py. */
enum { C_REQUESTS, C_REPLIES, C_INTERLEAVED, C_AUTHENTICATED, C_KOD_RATE, C_KOD_DENY, C_KOD_RSTR, C_CRYPTO_NAK,
       C_DROP_SHORT, C_DROP_OVERSIZE, C_DROP_MALFORMED, C_DROP_BAD_VERSION, C_DROP_CONTROL, C_DROP_MODE,
       C_DROP_DENIED, C_DROP_RATE_LIMITED, C_RX_NO_TS, C_TX_KERNEL_TS,
       C_HEARTBEAT, C_PID, C_FAST_PATH, C_SLOW_PATH,  /* the worker's own: always 0 here */
       C_NTS, C_NTS_NAK, C_DROP_NTS_MALFORMED, C_DROP_NTS_REPLAY, C_COUNT };

enum { DENY_DROP = 0, DENY_KOD_DENY = 1, DENY_KOD_RSTR = 2 };

typedef struct { int family; uint8_t net[16]; int prefix; int allow; } access_rule;

typedef struct { uint64_t rx_key; int64_t tx_ns; } xl_entry;

/* The busiest clients since take_clients last ran: space-saving counters (appliance/outputs/ntp/clients.py). */
#define TOP_CLIENTS 32
typedef struct { uint8_t key[8]; uint8_t keylen; uint64_t count, error; } tc_entry;

typedef struct {
    PyObject_HEAD
    int fd;
    Py_buffer shm;
    access_rule *rules;
    int nrules, deny_action;
    rate_table limiter;         /* the per-client rate limit (bucket.h) */
    xl_entry *xl;
    uint32_t xl_mask;
    uint64_t tx_ring[TX_RING];  /* OPT_ID -> receive timestamp of the reply (0: no transmit time kept) */
    uint32_t next_id;
    uint32_t pending_tx;        /* datagrams sent asking for a transmit timestamp, not yet read back */
    int wait_ms;                /* the socket's SO_RCVTIMEO as serve last set it (-2: not yet) */
    clock_map last_map;         /* the last consistent copy of the published map (read_map) */
    int last_map_ok;            /* ...published and valid */
    uint64_t counters[C_COUNT];
    tc_entry tc[TOP_CLIENTS];
    int tc_size;
    nts_state *nts;             /* NTS while it holds cookie keys (set_cookie_keys) */
    auth_keys *auth;            /* the symmetric keys (set_keys); none: a MAC gets a crypto-NAK */
} FastPath;

typedef struct {
    uint8_t data[MAX_REQUEST_LEN];  /* the header, then an NTS reply's extension fields */
    size_t len;
    int kod, interleaved, want_tx_ts;
    int seal;                       /* an NTS reply whose authenticator is sealed once its header is final */
    int sign_key;                   /* >= 0: signed with this key once its header is final (auth_sign) */
    int crypto_nak;                 /* a crypto-NAK: its transmit time is not kept for interleaved replies */
    int addr;                       /* the request's index in the batch */
    uint64_t rx_key;
    int64_t tx_ns;
} reply;

int client_address(const struct sockaddr_storage *sa, uint8_t out[16], int *port);
int prefix_match(const uint8_t *a, const uint8_t *net, int prefix);
int is_allowed(FastPath *self, int family, const uint8_t *addr);
void tc_note(FastPath *self, int family, const uint8_t *addr);
xl_entry *xl_slot(FastPath *self, uint64_t rx_key);
int64_t xl_take(FastPath *self, uint64_t rx_key);
void xl_put(FastPath *self, uint64_t rx_key, int64_t tx_ns);
void xl_update(FastPath *self, uint64_t rx_key, int64_t tx_ns);
void build_header(uint8_t *out, const uint8_t *req, const clock_map *m, int stratum, int leap, const uint8_t *refid, int poll, uint32_t root_delay, uint32_t root_disp, uint64_t ref_ts, uint64_t origin, uint64_t receive);
void make_kod(FastPath *self, reply *r, const uint8_t *req, const clock_map *m, int64_t rx_ns, const char *code, int slot);
void make_reply(FastPath *self, reply *r, const uint8_t *req, const clock_map *m, int64_t rx_ns, int xleave);
int trailer_ok(const uint8_t *d, ssize_t len, int version);
int shape(const uint8_t *d, ssize_t len, int port);
int nts_answer(FastPath *self, reply *r, int slot, const uint8_t *d, ssize_t len, const clock_map *m, int64_t rx_ns, int limit);
int nts_decides(FastPath *self, const uint8_t *d, ssize_t len);
void mac_answer(FastPath *self, reply *r, const uint8_t *d, ssize_t len, const clock_map *m, int64_t rx_ns, int limit);
void not_ready(clock_map *m, int64_t host_ns);

/* timebase.posix_ns_to_ntp64: round half up of (ns since 1900) * 2^32 / 1e9, modulo 2^64. */
static inline uint64_t posix_to_ntp64(int64_t posix_ns) {
    __int128 num = (__int128)(posix_ns + NTP_UNIX_OFFSET_NS) * ((__int128)1 << 32);
    __int128 den = NS_PER_S;
    __int128 q = (2 * num + den) / (2 * den);
    if ((2 * num + den) % (2 * den) < 0) q -= 1;  /* floor division, as Python's // */
    return (uint64_t)q;
}

static inline uint64_t ntp_ts(const clock_map *m, int64_t host_ns) { return posix_to_ntp64(cm_served_posix_ns(m, host_ns)); }

static inline uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static inline void put64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

static inline void put32(uint8_t *p, uint32_t v) {
    for (int i = 3; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

#endif
