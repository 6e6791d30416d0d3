/* _delayreq.c: the native PTP event sender's Delay_Req answers for negotiated unicast clients; see _syncsend.c. */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include "_syncsend.h"

/* ---------------------------------------------------------------------------------------- Delay_Req answers */

int make_key(const struct sockaddr_storage *addr, const uint8_t *port_id, client_key *key) {
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

uint32_t key_hash(const client_key *key) {
    const uint8_t *p = (const uint8_t *)key;
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (size_t i = 0; i < sizeof(*key); i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

/* The slot of ``key`` in the table (its index + 1 there), or, when absent, the first free one on its probe path
 * (*found 0).  The table is never full: it grows at half. */
int32_t probe(const SyncSender *s, const client_key *key, int *found) {
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

int32_t find_client(const SyncSender *s, const struct sockaddr_storage *addr, const uint8_t *port_id) {
    client_key key;
    int found;
    if (s->cap_dslots == 0 || make_key(addr, port_id, &key) < 0) return -1;
    int32_t at = probe(s, &key, &found);
    return found ? s->dslots[at] - 1 : -1;
}

int grow_slots(SyncSender *s) {
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

int64_t rx_timestamp(struct msghdr *msg) { return ks_timestamp_ns(msg); }

/* A Delay_Req this thread answers itself: exactly a 44-octet Delay_Req of PTP version 2 (majorSdoId 0) in the
 * port's domain with the unicast flag, not our own, from a registered client.  The rest goes to Python. */
int32_t answerable(const SyncSender *s, const uint8_t *m, unsigned len, const struct sockaddr_storage *from) {
    if (!s->delay_on || !s->active || !s->map_valid) return -1;
    if (s->auth ? len != MSG_LEN + ptpauth_extra(s->auth) : len != MSG_LEN) return -1;  /* signed: by our key only */
    if (m[0] != 0x01 || (m[1] & 0x0f) != 2 || (unsigned)((m[2] << 8) | m[3]) != len || m[4] != s->domain) return -1;
    if (s->auth && !ptpauth_verify(s->auth, m, len, MSG_LEN)) return -1;  /* Python counts why it is refused */
    if (!(m[6] & 0x04) || memcmp(m + 20, s->own_clock, 8) == 0) return -1;
    return find_client(s, from, m + 20);
}

void push_handoff(SyncSender *s, const uint8_t *m, unsigned len, const struct sockaddr_storage *from,
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
int answer_delay_reqs(SyncSender *s, int limit) {
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

