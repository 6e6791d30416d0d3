/*
 * bucket.h: the token bucket, the one implementation.  The NTP data plane's per-client rate limit, the PTP event
 * sender's per-client Delay_Req limit, and (through dataplane.c) the NTS-KE server, the console's and the SNMP agent's
 * per-client limits and their global request budgets all take tokens here.
 *
 * A bucket holds up to `burst` tokens and refills at `rate_per_s`; time is int64 nanoseconds of a monotonic clock.
 * refill: elapsed = max(0, now - last); tokens = min(burst, tokens + elapsed * rate_per_s / 1e9) (evaluated left to
 * right in IEEE-754 doubles); last = now.  A backward step refills nothing and restarts from the new now.
 *
 * rate_table: a bucket per client key (up to 16 bytes: an IPv4 address, an IPv6 /64, or a digest of another name)
 * in a true-LRU table of at most max_clients (appliance/protocol/limits.py's docstring states the algorithm): a new
 * key evicts the least recently seen one when full and starts with a full bucket; over its rate a client gets one
 * KoD (1) a second and DROPs (2) in between.
 */
#ifndef APPLIANCE_BUCKET_H
#define APPLIANCE_BUCKET_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TB_KOD_INTERVAL_NS 1000000000LL
#define TB_KEY_MAX 16

typedef struct { double tokens; int64_t last_ns; } tb_bucket;

static inline void tb_refill(tb_bucket *b, double rate_per_s, double burst, int64_t now_ns) {
    int64_t elapsed = now_ns - b->last_ns;
    if (elapsed < 0) elapsed = 0;
    double refilled = b->tokens + (double)elapsed * rate_per_s / 1e9;
    b->tokens = refilled < burst ? refilled : burst;
    b->last_ns = now_ns;
}

/* Refill, then take one token if there is one: 1 taken, 0 none. */
static inline int tb_take(tb_bucket *b, double rate_per_s, double burst, int64_t now_ns) {
    tb_refill(b, rate_per_s, burst, now_ns);
    if (b->tokens < 1.0) return 0;
    b->tokens -= 1.0;
    return 1;
}

/* A budget's reservation: refill, take one token even into debt, and return how long the caller must wait for it
   (0: now).  Reservations are served in order, so waiting callers go first come, first served. */
static inline int64_t tb_reserve_ns(tb_bucket *b, double rate_per_s, double burst, int64_t now_ns) {
    tb_refill(b, rate_per_s, burst, now_ns);
    b->tokens -= 1.0;
    return b->tokens >= 0 ? 0 : (int64_t)(-b->tokens / rate_per_s * 1e9 + 0.5);
}

typedef struct {
    uint8_t key[TB_KEY_MAX];
    uint8_t keylen, has_kod;
    tb_bucket bucket;
    int64_t last_kod_ns;
    int32_t prev, next, hnext;
} rt_entry;

typedef struct {
    double rate_per_s;
    int burst, max_clients;
    rt_entry *entries;
    int32_t *buckets;
    uint32_t nbuckets;
    int32_t head, tail, size;
    uint64_t passed, kod, dropped, evictions;
} rate_table;

/* 0, or -1 when out of memory. */
static inline int rt_init(rate_table *t, double rate_per_s, int burst, int max_clients) {
    memset(t, 0, sizeof(*t));
    t->rate_per_s = rate_per_s;
    t->burst = burst;
    t->max_clients = max_clients;
    t->entries = calloc((size_t)max_clients, sizeof(rt_entry));
    t->nbuckets = 1;
    while (t->nbuckets < (uint32_t)max_clients * 2) t->nbuckets <<= 1;
    t->buckets = malloc(t->nbuckets * sizeof(int32_t));
    if (!t->entries || !t->buckets) return -1;
    for (uint32_t i = 0; i < t->nbuckets; i++) t->buckets[i] = -1;
    t->head = t->tail = -1;
    return 0;
}

static inline void rt_free(rate_table *t) {
    free(t->entries);
    free(t->buckets);
    t->entries = NULL;
    t->buckets = NULL;
}

static inline uint32_t rt_hash(const uint8_t *key, int len) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < len; i++) h = (h ^ key[i]) * 16777619u;
    return h;
}

static inline void rt_unlink(rate_table *t, int32_t i) {
    rt_entry *e = &t->entries[i];
    if (e->prev >= 0) t->entries[e->prev].next = e->next; else t->head = e->next;
    if (e->next >= 0) t->entries[e->next].prev = e->prev; else t->tail = e->prev;
}

static inline void rt_append(rate_table *t, int32_t i) {
    rt_entry *e = &t->entries[i];
    e->prev = t->tail;
    e->next = -1;
    if (t->tail >= 0) t->entries[t->tail].next = i; else t->head = i;
    t->tail = i;
}

static inline void rt_unchain(rate_table *t, int32_t i) {
    rt_entry *e = &t->entries[i];
    int32_t *link = &t->buckets[rt_hash(e->key, e->keylen) & (t->nbuckets - 1)];
    while (*link != i) link = &t->entries[*link].hnext;
    *link = e->hnext;
}

/* 0 PASS, 1 KOD, 2 DROP.  keylen <= TB_KEY_MAX. */
static inline int rt_check(rate_table *t, const uint8_t *key, int keylen, int64_t now_ns) {
    if (t->rate_per_s == 0.0) { t->passed++; return 0; }
    uint32_t b = rt_hash(key, keylen) & (t->nbuckets - 1);
    int32_t i = t->buckets[b];
    while (i >= 0 && !(t->entries[i].keylen == keylen && memcmp(t->entries[i].key, key, (size_t)keylen) == 0))
        i = t->entries[i].hnext;
    if (i >= 0) {
        rt_unlink(t, i);
        rt_append(t, i);
    } else {
        if (t->size == t->max_clients) {
            i = t->head;
            rt_unlink(t, i);
            rt_unchain(t, i);
            t->evictions++;
        } else {
            i = t->size++;
        }
        rt_entry *e = &t->entries[i];
        memcpy(e->key, key, (size_t)keylen);
        e->keylen = (uint8_t)keylen;
        e->bucket.tokens = (double)t->burst;
        e->bucket.last_ns = now_ns;
        e->has_kod = 0;
        e->hnext = t->buckets[b];
        t->buckets[b] = i;
        rt_append(t, i);
    }
    rt_entry *e = &t->entries[i];
    if (tb_take(&e->bucket, t->rate_per_s, (double)t->burst, now_ns)) { t->passed++; return 0; }
    if (!e->has_kod || now_ns - e->last_kod_ns >= TB_KOD_INTERVAL_NS) {
        e->has_kod = 1;
        e->last_kod_ns = now_ns;
        t->kod++;
        return 1;
    }
    t->dropped++;
    return 2;
}

#endif
