/* _sender.c: the native PTP event sender's thread and what it sends; see _syncsend.c. */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include "_syncsend.h"

/* Sign the `len`-octet message at msg in place when the port signs (room for PTPAUTH_MAX more): its new length,
   or 0 when it must not be sent (libcrypto failed). */
size_t sign(SyncSender *s, uint8_t *msg, size_t len) {
    if (!s->auth) return len;
    size_t signed_len = ptpauth_sign(s->auth, msg, len);
    if (signed_len) s->auth_signed++; else s->auth_failed++;
    return signed_len;
}

/* ------------------------------------------------------------------------------------------------- helpers */

int64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

int64_t served_ns(const SyncSender *s, int64_t host_ns) {
    return cm_served_tai_ns(s->host_anchor_ns, s->served_anchor_ns, s->rate_ppb, host_ns);
}

void put_ts(uint8_t *p, int64_t ns) {
    if (ns < 0) ns = 0;
    uint64_t sec = (uint64_t)(ns / NS_PER_S);
    uint32_t frac = (uint32_t)(ns % NS_PER_S);
    p[0] = (uint8_t)(sec >> 40); p[1] = (uint8_t)(sec >> 32); p[2] = (uint8_t)(sec >> 24);
    p[3] = (uint8_t)(sec >> 16); p[4] = (uint8_t)(sec >> 8); p[5] = (uint8_t)sec;
    p[6] = (uint8_t)(frac >> 24); p[7] = (uint8_t)(frac >> 16); p[8] = (uint8_t)(frac >> 8); p[9] = (uint8_t)frac;
}

void add_lateness(SyncSender *s, int64_t ns, int64_t held_ns, int64_t pre_ns, int64_t woke_ns,
                         int64_t slot_mono_ns) {
    s->bins[lateness_bin(lateness_us(ns))]++;
    s->late_count++;
    if (ns > LATE_NS) {
        s->late_over++;
        if (ns - held_ns <= LATE_NS) s->late_over_held++;
        else if (ns - held_ns - woke_ns <= LATE_NS) s->late_over_woken++;
        s->late_recs[s->n_late_recs++ % LATE_RECS] = (late_rec){slot_mono_ns, ns, held_ns};
        if (pre_ns > s->late_pre_max_ns) s->late_pre_max_ns = pre_ns;
        if (ns - pre_ns > s->late_send_max_ns) s->late_send_max_ns = ns - pre_ns;
    }
    if (ns > s->late_max_ns) s->late_max_ns = ns;
    if (held_ns > s->held_max_ns) s->held_max_ns = held_ns;
}

/* The thread's held time so far: finished stretches plus the current one's wall time less its CPU time. */
int64_t held_now(const SyncSender *s, int64_t mono_ns) {
    return s->held_total_ns + (mono_ns - s->stretch_mono_ns) - (clock_ns(CLOCK_THREAD_CPUTIME_ID) - s->stretch_cpu_ns);
}

/* The held total at the last mark at or before ``mono_ns`` (a slot); the oldest mark when all are after it, which
 * leaves out held time before it (never counts more than there was). */
int64_t held_at(const SyncSender *s, int64_t mono_ns) {
    uint32_t n = s->n_marks < HELD_MARKS ? s->n_marks : HELD_MARKS;
    for (uint32_t k = 1; k <= n; k++) {
        const held_mark *m = &s->marks[(s->n_marks - k) % HELD_MARKS];
        if (m->mono_ns <= mono_ns || k == n) return m->held_ns;
    }
    return s->held_total_ns;
}

/* The sender thread takes the lock through this: the time it waits for the Python side to let go of it is the
 * appliance's own, not held time, so it is taken out of the held total. */
void lock_mu(SyncSender *s) {
    if (pthread_mutex_trylock(&s->mu) == 0) return;
    int64_t t0 = clock_ns(CLOCK_MONOTONIC);
    pthread_mutex_lock(&s->mu);
    int64_t waited = clock_ns(CLOCK_MONOTONIC) - t0;
    s->held_total_ns -= waited;
    s->lock_wait_total_ns += waited;
    if (waited > s->lock_wait_max_ns) s->lock_wait_max_ns = waited;
}

/* ------------------------------------------------------------------------------------------------ the heap */

int heap_push(heap *h, int64_t slot_ns, int32_t index, uint32_t gen) {
    if (h->len == h->cap) {
        int32_t cap = h->cap ? h->cap * 2 : 1024;
        heap_item *grown = realloc(h->items, (size_t)cap * sizeof(*grown));
        if (grown == NULL) return -1;
        h->items = grown;
        h->cap = cap;
    }
    int32_t i = h->len++;
    while (i > 0) {
        int32_t up = (i - 1) / 2;
        if (h->items[up].slot_ns <= slot_ns) break;
        h->items[i] = h->items[up];
        i = up;
    }
    h->items[i] = (heap_item){slot_ns, index, gen};
    return 0;
}

heap_item heap_pop(heap *h) {
    heap_item top = h->items[0], last = h->items[--h->len];
    int32_t i = 0, n = h->len;
    for (;;) {
        int32_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && h->items[child + 1].slot_ns < h->items[child].slot_ns) child++;
        if (h->items[child].slot_ns >= last.slot_ns) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (n > 0) h->items[i] = last;
    return top;
}

/* The earliest live slot of a kind (stale entries of removed or changed streams dropped), or -1. */
int64_t next_slot(SyncSender *s, int kind) {
    heap *h = &s->heaps[kind];
    while (h->len > 0) {
        heap_item top = h->items[0];
        stream *st = &s->streams[top.index];
        if (st->used && st->gen == top.gen && st->next_slot_ns == top.slot_ns) return top.slot_ns;
        heap_pop(h);
    }
    return -1;
}

/* The stream whose slot (at most ``now``) comes first, moved on to its next slot; -1 when none is due. */
int32_t take_due(SyncSender *s, int kind, int64_t now, int64_t *slot_out) {
    int64_t slot = next_slot(s, kind);
    if (slot < 0 || slot > now) return -1;
    heap_item top = heap_pop(&s->heaps[kind]);
    stream *st = &s->streams[top.index];
    int64_t nxt = slot + st->step_ns;
    st->next_slot_ns = nxt > now ? nxt : now + st->step_ns;  /* a stall is not followed by a burst */
    heap_push(&s->heaps[kind], st->next_slot_ns, top.index, st->gen);
    *slot_out = slot;
    return top.index;
}

int64_t sendmmsg_all(int fd, struct mmsghdr *out, int n, uint64_t *errors) {
    int64_t sent = 0;
    for (int done = 0; done < n;) {
        int k = sendmmsg(fd, out + done, (unsigned)(n - done), 0);
        if (k <= 0) {  /* this one was not sent; go on with the rest */
            (*errors)++;
            done++;
            continue;
        }
        sent += k;
        done += k;
    }
    return sent;
}

/* Sends ``n`` messages on the port's general socket, counting those sent into ``*sent_count`` (under the lock). */
void send_general(SyncSender *s, struct mmsghdr *out, int n, uint64_t *sent_count) {
    if (n == 0) return;
    uint64_t errors = 0;
    int64_t sent = sendmmsg_all(s->general_fd, out, n, &errors);
    lock_mu(s);
    *sent_count += (uint64_t)sent;
    s->send_errors += errors;
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------------------------------------ the thread */

/* Reads at most ``limit`` transmit timestamps and sends their Follow_Ups; returns how many it read. */
int read_timestamps(SyncSender *s, int limit) {
    struct mmsghdr out[BATCH];
    struct iovec iov[BATCH];
    uint8_t fups[BATCH][MSG_LEN + PTPAUTH_MAX];
    int n_out = 0, n_read = 0;
    while (n_read < limit) {
        int64_t ts_ns = 0;
        uint32_t id = 0;
        int got = ks_read_tx(s->event_fd, &ts_ns, &id);
        if (got < 0) break;
        n_read++;
        if (!got) continue;
        lock_mu(s);
        pending *p = &s->ring[id % RING];
        if (p->valid) {
            p->valid = 0;
            s->awaited--;
            stream *st = &s->streams[p->index];
            if (st->used && st->gen == p->gen) {
                int64_t tx_served = served_ns(s, ts_ns);
                add_lateness(s, tx_served - p->slot_served_ns, p->held_ns, p->pre_ns, p->woke_ns,
                             p->sent_mono_ns - p->pre_ns);
                memcpy(fups[n_out], st->fup_tpl, MSG_LEN);
                fups[n_out][30] = (uint8_t)(p->seq >> 8);
                fups[n_out][31] = (uint8_t)p->seq;
                put_ts(fups[n_out] + 34, tx_served);
                size_t flen = sign(s, fups[n_out], MSG_LEN);
                if (!flen) { pthread_mutex_unlock(&s->mu); continue; }
                iov[n_out] = (struct iovec){fups[n_out], flen};
                memset(&out[n_out], 0, sizeof(out[n_out]));
                out[n_out].msg_hdr.msg_name = &st->general_addr;
                out[n_out].msg_hdr.msg_namelen = st->addr_len;
                out[n_out].msg_hdr.msg_iov = &iov[n_out];
                out[n_out].msg_hdr.msg_iovlen = 1;
                n_out++;
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (n_out == BATCH) {
            send_general(s, out, n_out, &s->follow_ups);
            n_out = 0;
        }
    }
    send_general(s, out, n_out, &s->follow_ups);
    return n_read;
}

/* Sends the Syncs due now, at most BATCH; returns how many (BATCH: look again at once). */
int send_syncs(SyncSender *s) {
    struct mmsghdr out[BATCH];
    struct iovec iov[BATCH];
    uint8_t msgs[BATCH][MSG_LEN + PTPAUTH_MAX];
    int32_t who[BATCH];
    int64_t slots[BATCH];
    int n = 0;
    lock_mu(s);
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    if (!s->active || !s->map_valid) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    for (int32_t index; n < BATCH && (index = take_due(s, KIND_SYNC, now, &slots[n])) >= 0; n++) {
        stream *st = &s->streams[index];
        memcpy(msgs[n], st->sync_tpl, MSG_LEN);
        iov[n] = (struct iovec){msgs[n], MSG_LEN};
        memset(&out[n], 0, sizeof(out[n]));
        out[n].msg_hdr.msg_name = &st->event_addr;
        out[n].msg_hdr.msg_namelen = st->addr_len;
        out[n].msg_hdr.msg_iov = &iov[n];
        out[n].msg_hdr.msg_iovlen = 1;
        who[n] = index;
    }
    if (n == 0) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    int64_t mono = clock_ns(CLOCK_MONOTONIC), served_now = served_ns(s, clock_ns(CLOCK_REALTIME));
    for (int i = 0; i < n; i++) {
        stream *st = &s->streams[who[i]];
        msgs[i][30] = (uint8_t)(st->seq >> 8);
        msgs[i][31] = (uint8_t)st->seq;
        put_ts(msgs[i] + 34, served_now);
        iov[i].iov_len = sign(s, msgs[i], MSG_LEN);
    }
    int kept = 0;  /* a Sync that could not be signed is not sent (its slot passes, its stream goes on) */
    for (int i = 0; i < n; i++) {
        if (!iov[i].iov_len) { s->send_errors++; continue; }
        if (kept != i) {
            memcpy(msgs[kept], msgs[i], iov[i].iov_len);
            iov[kept] = (struct iovec){msgs[kept], iov[i].iov_len};
            out[kept] = out[i];
            out[kept].msg_hdr.msg_iov = &iov[kept];
            who[kept] = who[i];
            slots[kept] = slots[i];
        }
        kept++;
    }
    n = kept;
    for (int done = 0; done < n;) {
        int k = sendmmsg(s->event_fd, out + done, (unsigned)(n - done), 0);
        if (k <= 0) {  /* this one was not sent: no OPT_ID was used for it; its sequenceId is used by the next */
            s->send_errors++;
            done++;
            continue;
        }
        int64_t held_sent = held_now(s, clock_ns(CLOCK_MONOTONIC));
        for (int i = done; i < done + k; i++) {
            stream *st = &s->streams[who[i]];
            pending *p = &s->ring[s->next_id % RING];
            if (p->valid) s->ts_lost++;
            else s->awaited++;
            *p = (pending){who[i], st->gen, st->seq, 1, served_now - (mono - slots[i]), mono,
                           held_sent - held_at(s, slots[i]), mono - slots[i],
                           slots[i] >= s->woke_due_ns && slots[i] < s->woke_at_ns ? s->woke_at_ns - slots[i] : 0};
            s->next_id++;
            st->seq++;
            st->sent++;
            s->syncs++;
        }
        done += k;
    }
    s->batches++;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Sends at most ``limit`` of the Announces due now (they carry no timestamp; Syncs go first); returns how many. */
int send_announces(SyncSender *s, int limit) {
    struct mmsghdr out[BATCH];
    struct iovec iov[BATCH];
    static __thread uint8_t msgs[BATCH][ANNOUNCE_MAX + PTPAUTH_MAX];
    int n = 0;
    int64_t slot;
    if (limit > BATCH) limit = BATCH;
    lock_mu(s);
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    if (!s->active || !s->map_valid) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    int64_t served_now = served_ns(s, clock_ns(CLOCK_REALTIME));
    for (int32_t index; n < limit && (index = take_due(s, KIND_ANNOUNCE, now, &slot)) >= 0;) {
        stream *st = &s->streams[index];
        int len = s->announce_len[st->log_index];
        if (len == 0) continue;  /* nothing to say at this interval yet */
        memcpy(msgs[n], s->announce_tpl[st->log_index], (size_t)len);
        msgs[n][30] = (uint8_t)(st->seq >> 8);
        msgs[n][31] = (uint8_t)st->seq;
        put_ts(msgs[n] + 34, served_now);
        size_t alen = sign(s, msgs[n], (size_t)len);
        if (!alen) continue;
        st->seq++;
        st->sent++;
        iov[n] = (struct iovec){msgs[n], alen};
        memset(&out[n], 0, sizeof(out[n]));
        out[n].msg_hdr.msg_name = &st->general_addr;
        out[n].msg_hdr.msg_namelen = st->addr_len;
        out[n].msg_hdr.msg_iov = &iov[n];
        out[n].msg_hdr.msg_iovlen = 1;
        n++;
    }
    pthread_mutex_unlock(&s->mu);
    send_general(s, out, n, &s->announces);
    return n;
}

/* Timestamps that never came (a full error queue drops them): forgotten after TS_LOST_NS, oldest first. */
void forget_lost(SyncSender *s, int64_t now) {
    if (s->next_id - s->oldest_id > RING) s->oldest_id = s->next_id - RING;
    while (s->oldest_id != s->next_id) {
        pending *p = &s->ring[s->oldest_id % RING];
        if (p->valid) {
            if (now - p->sent_mono_ns < TS_LOST_NS) break;
            p->valid = 0;
            s->awaited--;
            s->ts_lost++;
        }
        s->oldest_id++;
    }
}

void *run(void *arg) {
    SyncSender *s = arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    s->stretch_mono_ns = clock_ns(CLOCK_MONOTONIC);
    s->stretch_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    while (__atomic_load_n(&s->running, __ATOMIC_ACQUIRE)) {
        int64_t mark = clock_ns(CLOCK_MONOTONIC), mark_held = held_now(s, mark), mark_lock = s->lock_wait_total_ns;
        s->marks[s->n_marks++ % HELD_MARKS] = (held_mark){mark, mark_held};
        /* Due Syncs first, every time round; the rest in small bites, so that a Sync never waits behind much. */
        int sent = 0, k, f, a;
        while ((k = send_syncs(s)) == BATCH) sent += k;
        f = read_timestamps(s, BITE);
        a = send_announces(s, BITE);
        int q = answer_delay_reqs(s, BITE);
        sent += k + f + a + q;
        int64_t end = clock_ns(CLOCK_MONOTONIC), round_cpu = (end - mark) - (held_now(s, end) - mark_held);
        if (round_cpu > LATE_NS) {
            lock_mu(s);
            s->long_rounds++;
            if (round_cpu > s->long_round_cpu_max_ns) {
                s->long_round_cpu_max_ns = round_cpu;
                s->long_round_packets = sent;
                s->long_round_lock_ns = s->lock_wait_total_ns - mark_lock;
            }
            pthread_mutex_unlock(&s->mu);
        }
        if (f == BITE || a == BITE || q == BITE) continue;
        lock_mu(s);
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        forget_lost(s, now);
        int64_t due = -1;
        if (s->active && s->map_valid) {
            int64_t sync = next_slot(s, KIND_SYNC), announce = next_slot(s, KIND_ANNOUNCE);
            due = sync < 0 ? announce : announce < 0 ? sync : (sync < announce ? sync : announce);
        }
        int64_t wait = due < 0 ? 100 * 1000000LL : due - now;
        if (s->awaited > 0 && wait > TX_WAIT_NS) wait = TX_WAIT_NS;
        pthread_mutex_unlock(&s->mu);
        if (wait <= 0) continue;
        /* POLLERR: a timestamp; POLLIN: a Delay_Req */
        struct pollfd fds[2] = {{s->event_fd, __atomic_load_n(&s->delay_on, __ATOMIC_ACQUIRE) ? POLLIN : 0, 0},
                                {s->wake_fd, POLLIN, 0}};
        struct timespec ts = {wait / NS_PER_S, wait % NS_PER_S};
        int64_t before = clock_ns(CLOCK_MONOTONIC);
        s->held_total_ns = held_now(s, before);  /* the stretch ends: waiting is not held time */
        s->marks[s->n_marks++ % HELD_MARKS] = (held_mark){before, s->held_total_ns};
        int r = ppoll(fds, 2, &ts, NULL);
        s->stretch_mono_ns = clock_ns(CLOCK_MONOTONIC);
        s->stretch_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        if (r == 0 && due >= 0) {  /* woke for a slot: how late the scheduler let it run */
            int64_t late = clock_ns(CLOCK_MONOTONIC) - due;
            s->woke_due_ns = due;
            s->woke_at_ns = due + late;
            lock_mu(s);
            if (late > LATE_NS) s->wakes_over_1ms++;
            if (late > s->wake_max_ns) s->wake_max_ns = late;
            pthread_mutex_unlock(&s->mu);
        }
        if (r > 0 && (fds[1].revents & POLLIN)) {
            uint64_t v;
            if (read(s->wake_fd, &v, sizeof(v)) < 0) { /* another wake-up read it */ }
        }
    }
    return NULL;
}

