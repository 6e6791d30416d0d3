/*
 * _syncsend.h: the native PTP event sender's shared definitions: its limits, its state (one SyncSender per port
 * transport) and the functions its three parts call across: _sender.c (the thread: Syncs, Follow_Ups, Announces,
 * the lateness record), _delayreq.c (Delay_Req answers for negotiated unicast clients) and _syncsend.c (the Python
 * type).  See _syncsend.c for what the sender does.
 */
#ifndef APPLIANCE_SYNCSEND_H
#define APPLIANCE_SYNCSEND_H

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
#include "kstamp.h"
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

size_t sign(SyncSender *s, uint8_t *msg, size_t len);
int64_t clock_ns(clockid_t id);
int64_t served_ns(const SyncSender *s, int64_t host_ns);
void put_ts(uint8_t *p, int64_t ns);
void add_lateness(SyncSender *s, int64_t ns, int64_t held_ns, int64_t pre_ns, int64_t woke_ns, int64_t slot_mono_ns);
int64_t held_now(const SyncSender *s, int64_t mono_ns);
int64_t held_at(const SyncSender *s, int64_t mono_ns);
void lock_mu(SyncSender *s);
int heap_push(heap *h, int64_t slot_ns, int32_t index, uint32_t gen);
heap_item heap_pop(heap *h);
int64_t next_slot(SyncSender *s, int kind);
int32_t take_due(SyncSender *s, int kind, int64_t now, int64_t *slot_out);
int64_t sendmmsg_all(int fd, struct mmsghdr *out, int n, uint64_t *errors);
void send_general(SyncSender *s, struct mmsghdr *out, int n, uint64_t *sent_count);
int make_key(const struct sockaddr_storage *addr, const uint8_t *port_id, client_key *key);
uint32_t key_hash(const client_key *key);
int32_t probe(const SyncSender *s, const client_key *key, int *found);
int32_t find_client(const SyncSender *s, const struct sockaddr_storage *addr, const uint8_t *port_id);
int grow_slots(SyncSender *s);
int64_t rx_timestamp(struct msghdr *msg);
int32_t answerable(const SyncSender *s, const uint8_t *m, unsigned len, const struct sockaddr_storage *from);
void push_handoff(SyncSender *s, const uint8_t *m, unsigned len, const struct sockaddr_storage *from, socklen_t from_len, int64_t ts);
int answer_delay_reqs(SyncSender *s, int limit);
int read_timestamps(SyncSender *s, int limit);
int send_syncs(SyncSender *s);
int send_announces(SyncSender *s, int limit);
void forget_lost(SyncSender *s, int64_t now);
void *run(void *arg);

#endif
