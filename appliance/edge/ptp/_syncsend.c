/* The Sync sender: a native thread that sends each two-step Sync stream's Sync at its slot and its Follow_Up as soon
 * as the kernel's transmit timestamp is read, and each unicast client's Announces, without the interpreter.
 *
 * I/O edge.  The Python port keeps everything else (negotiation, Delay_Resp, management, the state, the multicast
 * Announces); it hands this object one stream per Sync or Announce grant, and one for the multicast Syncs: the
 * destination, the messages as templates (encoded by the codec; only sequenceId at octet 30 and the first Timestamp
 * at octet 34 change here; an Announce template is shared by every stream of its interval and replaced when what it
 * says changes), the interval and the first slot.  The thread sleeps in ppoll until the earliest slot (a
 * CLOCK_MONOTONIC instant, timer slack 1 ns, SCHED_FIFO when allowed), sends every due Sync with sendmmsg on its own
 * event socket (bound to port 319 beside the port's, in the same SO_REUSEPORT group, every received datagram steered
 * to the port's socket), reads their software transmit timestamps from its error queue (numbered by
 * SOF_TIMESTAMPING_OPT_ID), maps them onto the served clock with the map Python publishes (ClockMap.served_tai_ns),
 * and sends the Follow_Ups with sendmmsg on the port's general socket, as it does the Announces.  Syncs go first:
 * Follow_Ups and Announces go out BITE at a time with a look for due Syncs in between.  Each Sync's lateness
 * (transmit time minus slot, both on the served clock) goes into the same log-linear histogram as
 * outputs/ptp/lateness.py, which ``take()`` hands to the port, with the thread's own timed wake-ups that came over
 * 1 ms late (the scheduler's or the host's share).  The socket is polled only while the thread waits, so no
 * wake-up callback runs between a Sync's timestamp and its leaving.
 *
 * Held time: while the thread runs (between two waits in ppoll), wall time (CLOCK_MONOTONIC) that its CPU time
 * (CLOCK_THREAD_CPUTIME_ID) does not account for is time it was held off the CPU.  For a SCHED_FIFO thread that is
 * the hypervisor's (a kernel with paravirtual steal accounting leaves stolen time out of a task's CPU time; without
 * interrupt-time accounting, interrupt and softirq work done in its context is in it) or a higher-priority thread's.
 * Each Sync carries the held time between its slot and its sending; a Sync over 1 ms late that would have been
 * within 1 ms without it is counted apart (late_over_1ms_held), so a verdict can tell the host's share from the
 * sender's own.  Held time while waiting past a slot is not in it: a Sync late by a timed wake-up that came over
 * 1 ms after its slot (the timer interrupt came late, or the CPU was in a section the kernel does not preempt) is
 * counted apart again (late_over_1ms_woken): the kernel's or the host's, the trace says which.
 *
 * Delay_Req answers (set_delay, for unicast-negotiating clients): the event socket's reuseport program then steers
 * every datagram whose messageType is Delay_Req to this object's socket, and the thread answers those of the
 * clients Python registered (add_client: a Delay_Resp grant) between its Syncs, a token bucket per client at the
 * port's request rate; everything else it does not answer (a client without a grant, another domain or version, a
 * message with a suffix, no receive timestamp, the port not MASTER) goes back to Python whole, with its receive
 * timestamp, through a ring and an eventfd (handoff_fd, take_handoff), where the port decides as it always did.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include "_syncsend.h"

/* ------------------------------------------------------------------------------------------------ Python side */

static void wake(SyncSender *s) {
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof(one)) < 0) { /* the counter is already non-zero */ }
}

static int parse_address(PyObject *addr, int port, struct sockaddr_storage *out, socklen_t *len) {
    const char *host;
    int given_port = 0;
    unsigned int flow = 0, scope = 0;
    if (!PyArg_ParseTuple(addr, "si|II", &host, &given_port, &flow, &scope)) return -1;
    memset(out, 0, sizeof(*out));
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof(*v4);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        v6->sin6_scope_id = scope;
        *len = sizeof(*v6);
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "not an IP address: %s", host);
    return -1;
}

static PyObject *ss_set_map(SyncSender *s, PyObject *args) {
    int valid;
    long long host, served;
    double rate;
    if (!PyArg_ParseTuple(args, "pLLd", &valid, &host, &served, &rate)) return NULL;
    pthread_mutex_lock(&s->mu);
    s->map_valid = valid, s->host_anchor_ns = host, s->served_anchor_ns = served, s->rate_ppb = rate;
    pthread_mutex_unlock(&s->mu);
    wake(s);
    Py_RETURN_NONE;
}

static PyObject *ss_set_active(SyncSender *s, PyObject *args) {
    int active;
    if (!PyArg_ParseTuple(args, "p", &active)) return NULL;
    pthread_mutex_lock(&s->mu);
    int was = s->active;
    s->active = active;
    pthread_mutex_unlock(&s->mu);
    if (active && !was) wake(s);
    Py_RETURN_NONE;
}

/* add(address, sync_template, follow_up_template, step_ns, first_slot_ns, first_seq) -> index: a Sync stream.
 * add(address, None, log_interval, step_ns, first_slot_ns, first_seq) -> index: an Announce stream, sending the
 * Announce template set for log_interval (set_announce) to the general port. */
static PyObject *ss_add(SyncSender *s, PyObject *args) {
    PyObject *addr, *first_arg, *second_arg;
    Py_buffer sync_tpl = {0}, fup_tpl = {0};
    long long step, first;
    int seq, kind = KIND_SYNC, log_index = 0;
    if (!PyArg_ParseTuple(args, "OOOLLi", &addr, &first_arg, &second_arg, &step, &first, &seq)) return NULL;
    struct sockaddr_storage ev, ge;
    socklen_t len = 0;
    PyObject *result = NULL;
    if (first_arg == Py_None) {
        long log = PyLong_AsLong(second_arg);
        if (log == -1 && PyErr_Occurred()) return NULL;
        if (log < -8 || log > 7) {
            PyErr_SetString(PyExc_ValueError, "an Announce log interval must be -8..7");
            return NULL;
        }
        kind = KIND_ANNOUNCE;
        log_index = (int)log + 8;
    } else {
        if (PyObject_GetBuffer(first_arg, &sync_tpl, PyBUF_SIMPLE) < 0) return NULL;
        if (PyObject_GetBuffer(second_arg, &fup_tpl, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&sync_tpl);
            return NULL;
        }
        if (sync_tpl.len != MSG_LEN || fup_tpl.len != MSG_LEN) {
            PyErr_SetString(PyExc_ValueError, "templates must be 44-octet Sync and Follow_Up messages");
            goto done;
        }
    }
    if (step <= 0) {
        PyErr_SetString(PyExc_ValueError, "step must be > 0");
        goto done;
    }
    if (parse_address(addr, s->event_port, &ev, &len) < 0 || parse_address(addr, s->general_port, &ge, &len) < 0)
        goto done;
    pthread_mutex_lock(&s->mu);
    int32_t index = -1;
    if (s->n_used < s->n_streams)  /* a free slot below n_streams: from the last one freed on */
        for (int32_t k = 0, i = s->free_hint; k < s->n_streams; k++, i = (i + 1) % s->n_streams)
            if (!s->streams[i].used) { index = i; break; }
    if (index < 0) {
        if (s->n_streams == s->cap_streams) {
            int32_t cap = s->cap_streams ? s->cap_streams * 2 : 256;
            stream *grown = realloc(s->streams, (size_t)cap * sizeof(*grown));
            if (grown == NULL) {
                pthread_mutex_unlock(&s->mu);
                PyErr_NoMemory();
                goto done;
            }
            s->streams = grown;
            s->cap_streams = cap;
        }
        index = s->n_streams++;
        s->streams[index].gen = 0;
    }
    stream *st = &s->streams[index];
    s->n_used++;
    uint32_t gen = st->gen + 1;
    memset(st, 0, sizeof(*st));
    st->used = 1;
    st->gen = gen;
    st->event_addr = ev;
    st->general_addr = ge;
    st->addr_len = len;
    st->kind = kind;
    st->log_index = log_index;
    if (kind == KIND_SYNC) {
        memcpy(st->sync_tpl, sync_tpl.buf, MSG_LEN);
        memcpy(st->fup_tpl, fup_tpl.buf, MSG_LEN);
    }
    st->step_ns = step;
    st->next_slot_ns = first;
    st->seq = (uint16_t)seq;
    int pushed = heap_push(&s->heaps[kind], first, index, gen);
    pthread_mutex_unlock(&s->mu);
    if (pushed < 0) {
        PyErr_NoMemory();
        goto done;
    }
    wake(s);
    result = PyLong_FromLong(index);
done:
    if (sync_tpl.obj) PyBuffer_Release(&sync_tpl);
    if (fup_tpl.obj) PyBuffer_Release(&fup_tpl);
    return result;
}

/* set_announce(log_interval, template): what Announce streams of that interval send from now on (sequenceId and
 * originTimestamp filled in per message). */
static PyObject *ss_set_announce(SyncSender *s, PyObject *args) {
    int log;
    Py_buffer tpl;
    if (!PyArg_ParseTuple(args, "iy*", &log, &tpl)) return NULL;
    if (log < -8 || log > 7 || tpl.len < MSG_LEN || tpl.len > ANNOUNCE_MAX) {
        PyBuffer_Release(&tpl);
        PyErr_Format(PyExc_ValueError, "an Announce template: log interval -8..7 and 44..%d octets", ANNOUNCE_MAX);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    memcpy(s->announce_tpl[log + 8], tpl.buf, (size_t)tpl.len);
    s->announce_len[log + 8] = (int)tpl.len;
    pthread_mutex_unlock(&s->mu);
    PyBuffer_Release(&tpl);
    Py_RETURN_NONE;
}

/* remove(index) -> (Syncs sent, next sequenceId, next slot ns) */
static PyObject *ss_remove(SyncSender *s, PyObject *args) {
    int index;
    if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
    pthread_mutex_lock(&s->mu);
    if (index < 0 || index >= s->n_streams || !s->streams[index].used) {
        pthread_mutex_unlock(&s->mu);
        PyErr_Format(PyExc_KeyError, "no stream %d", index);
        return NULL;
    }
    stream *st = &s->streams[index];
    st->used = 0;
    st->gen++;
    s->n_used--;
    s->free_hint = index;
    unsigned long long sent = st->sent;
    int seq = st->seq;
    long long slot = st->next_slot_ns;
    pthread_mutex_unlock(&s->mu);
    return Py_BuildValue("(KiL)", sent, seq, slot);
}

/* set_delay(delay_resp_template, rate_per_s, burst): answer the registered clients' Delay_Reqs from now on.  The
 * template is a 54-octet Delay_Resp the codec encoded for this port (its domain, identity, version, flags); the
 * correctionField, sequenceId, logMessageInterval, receiveTimestamp and requestingPortIdentity are filled in. */
/* set_security(spp, key_id, algorithm, secret, allow_mutable) or set_security(None): from now on every message is
   signed with this key (algorithm 1 SHA256-128, 2 SHA256, 3 AES128, 4 AES256), and a Delay_Req is answered here only
   when it carries this key's valid AUTHENTICATION TLV (the rest goes back to Python, which counts why). */
static PyObject *ss_set_security(SyncSender *s, PyObject *args) {
    ptp_auth *fresh = NULL;
    if (!(PyTuple_GET_SIZE(args) == 1 && PyTuple_GET_ITEM(args, 0) == Py_None)) {
        int spp, algorithm, allow_mutable;
        unsigned long key_id;
        const char *secret;
        Py_ssize_t len;
        if (!PyArg_ParseTuple(args, "ikiy#p", &spp, &key_id, &algorithm, &secret, &len, &allow_mutable)) return NULL;
        if (key_id > 0xFFFFFFFFul ||
            !(fresh = ptpauth_new(spp, (uint32_t)key_id, algorithm, (const uint8_t *)secret, (size_t)len,
                                  allow_mutable)))
            return PyErr_Format(PyExc_ValueError, "security: spp 0..255, a 32-bit key id, an algorithm 1..4 and a key "
                                "of its length (libcrypto may also have refused it)");
    }
    pthread_mutex_lock(&s->mu);
    ptp_auth *old = s->auth;
    s->auth = fresh;
    pthread_mutex_unlock(&s->mu);
    ptpauth_free(old);
    Py_RETURN_NONE;
}

static PyObject *ss_set_delay(SyncSender *s, PyObject *args) {
    Py_buffer tpl;
    double rate;
    int burst;
    if (!PyArg_ParseTuple(args, "y*di", &tpl, &rate, &burst)) return NULL;
    if (tpl.len != DRESP_LEN || !(rate >= 0) || !isfinite(rate) || burst < 1) {
        PyBuffer_Release(&tpl);
        PyErr_SetString(PyExc_ValueError, "a 54-octet Delay_Resp template, a rate >= 0 and a burst >= 1");
        return NULL;
    }
    handoff *ring = NULL;
    if (s->handoffs == NULL && (ring = calloc(HANDOFF_RING, sizeof(*ring))) == NULL) {
        PyBuffer_Release(&tpl);
        return PyErr_NoMemory();
    }
    pthread_mutex_lock(&s->mu);
    if (ring != NULL) s->handoffs = ring;
    memcpy(s->dresp_tpl, tpl.buf, DRESP_LEN);
    memcpy(s->own_clock, s->dresp_tpl + 20, 8);
    s->domain = s->dresp_tpl[4];
    s->rate_per_s = rate;
    s->burst = burst;
    __atomic_store_n(&s->delay_on, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
    PyBuffer_Release(&tpl);
    wake(s);
    Py_RETURN_NONE;
}

static int parse_client(PyObject *args, struct sockaddr_storage *addr, client_key *key, int *log) {
    PyObject *address;
    Py_buffer port_id;
    socklen_t len;
    *log = 0;
    if (!PyArg_ParseTuple(args, "Oy*|i", &address, &port_id, log)) return -1;
    int bad = port_id.len != 10;
    if (bad) PyErr_SetString(PyExc_ValueError, "a portIdentity is 10 octets");
    else bad = parse_address(address, 0, addr, &len) < 0 || make_key(addr, port_id.buf, key) < 0;
    PyBuffer_Release(&port_id);
    if (!bad && (*log < -128 || *log > 127)) {
        PyErr_SetString(PyExc_ValueError, "a log interval must be -128..127");
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* add_client(address, port_identity, log_interval) -> index: a client whose Delay_Reqs are answered here (again:
 * its log interval changes). */
static PyObject *ss_add_client(SyncSender *s, PyObject *args) {
    struct sockaddr_storage addr;
    client_key key;
    int log, found;
    if (parse_client(args, &addr, &key, &log) < 0) return NULL;
    pthread_mutex_lock(&s->mu);
    if ((s->dslots_taken + 1) * 2 > s->cap_dslots && grow_slots(s) < 0) {
        pthread_mutex_unlock(&s->mu);
        return PyErr_NoMemory();
    }
    int32_t at = probe(s, &key, &found), index;
    if (found) {
        index = s->dslots[at] - 1;
    } else {
        if (s->n_dclients == s->cap_dclients) {
            int32_t cap = s->cap_dclients ? s->cap_dclients * 2 : 256;
            dclient *grown = realloc(s->dclients, (size_t)cap * sizeof(*grown));
            if (grown == NULL) {
                pthread_mutex_unlock(&s->mu);
                return PyErr_NoMemory();
            }
            s->dclients = grown;
            s->cap_dclients = cap;
        }
        index = -1;
        if (s->n_dused < s->n_dclients)  /* a free one below n_dclients: from the last one removed on */
            for (int32_t k = 0, i = s->dfree_hint; k < s->n_dclients; k++, i = (i + 1) % s->n_dclients)
                if (!s->dclients[i].used) { index = i; break; }
        if (index < 0) index = s->n_dclients++;
        if (s->dslots[at] == 0) s->dslots_taken++;
        s->dslots[at] = index + 1;
        s->n_dused++;
        s->dclients[index] = (dclient){.used = 1, .key = key,
                                       .bucket = {(double)s->burst, clock_ns(CLOCK_MONOTONIC)}};
    }
    s->dclients[index].log_interval = (int8_t)log;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLong(index);
}

/* remove_client(address, port_identity) -> requests answered since the last take (0 when it was not there). */
static PyObject *ss_remove_client(SyncSender *s, PyObject *args) {
    struct sockaddr_storage addr;
    client_key key;
    int log, found = 0;
    if (parse_client(args, &addr, &key, &log) < 0) return NULL;
    unsigned long long requests = 0;
    pthread_mutex_lock(&s->mu);
    if (s->cap_dslots) {
        int32_t at = probe(s, &key, &found);
        if (found) {
            s->dfree_hint = s->dslots[at] - 1;
            dclient *d = &s->dclients[s->dfree_hint];
            requests = d->requests;
            d->used = 0;
            s->dslots[at] = -1;
            s->n_dused--;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromUnsignedLongLong(requests);
}

static PyObject *address_tuple(const struct sockaddr_storage *addr) {
    char text[INET6_ADDRSTRLEN];
    if (addr->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)addr;
        inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
        return Py_BuildValue("(si)", text, ntohs(v4->sin_port));
    }
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)addr;
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return Py_BuildValue("(siII)", text, ntohs(v6->sin6_port), ntohl(v6->sin6_flowinfo), v6->sin6_scope_id);
}

/* take_handoff() -> [(datagram, source address, receive timestamp ns or None)]: what the thread did not answer. */
static PyObject *ss_take_handoff(SyncSender *s, PyObject *noargs) {
    uint64_t v;
    if (read(s->handoff_fd, &v, sizeof(v)) < 0) { /* nothing signalled: there may still be some */ }
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (;;) {
        handoff h;
        pthread_mutex_lock(&s->mu);
        int any = s->handoffs != NULL && s->ho_head != s->ho_tail;
        if (any) h = s->handoffs[s->ho_head++ % HANDOFF_RING];
        pthread_mutex_unlock(&s->mu);
        if (!any) break;
        PyObject *addr = address_tuple(&h.addr);
        PyObject *item = addr == NULL ? NULL : h.ts_ns ? Py_BuildValue("(y#NL)", h.data, (Py_ssize_t)h.len, addr,
                                                                       (long long)h.ts_ns)
                                                       : Py_BuildValue("(y#NO)", h.data, (Py_ssize_t)h.len, addr,
                                                                       Py_None);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

/* take() -> dict of counters since the last take and the lateness histogram's non-empty bins [(bin, count)] */
static PyObject *ss_take(SyncSender *s, PyObject *noargs) {
    PyObject *bins = PyList_New(0);
    if (bins == NULL) return NULL;
    pthread_mutex_lock(&s->mu);
    uint64_t copy[N_BINS];
    memcpy(copy, s->bins, sizeof(copy));
    memset(s->bins, 0, sizeof(s->bins));
    unsigned long long count = s->late_count, over = s->late_over, syncs = s->syncs, fups = s->follow_ups,
        errors = s->send_errors, lost = s->ts_lost, batches = s->batches, announces = s->announces;
    long long max_ns = s->late_max_ns;
    s->late_count = s->late_over = s->syncs = s->follow_ups = s->send_errors = s->ts_lost = s->batches = 0;
    s->announces = 0;
    unsigned long long auth_signed = s->auth_signed, auth_failed = s->auth_failed;
    s->auth_signed = s->auth_failed = 0;
    unsigned long long wakes_over = s->wakes_over_1ms, over_held = s->late_over_held, over_woken = s->late_over_woken;
    s->late_over_woken = 0;
    long long wake_max = s->wake_max_ns, held_max = s->held_max_ns;
    long long pre_max = s->late_pre_max_ns, send_max = s->late_send_max_ns;
    s->late_pre_max_ns = s->late_send_max_ns = 0;
    unsigned long long long_rounds = s->long_rounds;
    long long long_cpu = s->long_round_cpu_max_ns;
    int long_pkts = s->long_round_packets;
    long long long_lock = s->long_round_lock_ns, lock_max = s->lock_wait_max_ns;
    s->long_round_lock_ns = s->lock_wait_max_ns = 0;
    s->long_rounds = 0;
    s->long_round_cpu_max_ns = 0;
    s->long_round_packets = 0;
    s->wakes_over_1ms = s->late_over_held = 0;
    s->wake_max_ns = s->held_max_ns = 0;
    s->late_max_ns = 0;
    int32_t streams = s->n_used;
    unsigned long awaited = s->awaited;
    unsigned long long answered = s->delay_answered, limited = s->delay_rate_limited, handed = s->handed_off,
        ho_dropped = s->handoff_dropped;
    s->delay_answered = s->delay_rate_limited = s->handed_off = s->handoff_dropped = 0;
    /* (index, requests, last seen monotonic ns) of the clients heard from: copied under the lock, made into
     * Python objects after it (the sender must not wait on the interpreter) */
    int64_t *heard = s->n_dclients ? malloc((size_t)s->n_dclients * 3 * sizeof(int64_t)) : NULL;
    int32_t n_heard = 0;
    for (int32_t i = 0; heard != NULL && i < s->n_dclients; i++) {
        dclient *d = &s->dclients[i];
        if (!d->used || !d->requests) continue;
        heard[3 * n_heard] = i, heard[3 * n_heard + 1] = (int64_t)d->requests, heard[3 * n_heard + 2] = d->last_seen_ns;
        n_heard++;
        d->requests = 0;
    }
    uint32_t n_recs = s->n_late_recs < LATE_RECS ? s->n_late_recs : LATE_RECS;
    unsigned long long recs_lost = s->n_late_recs - n_recs;
    late_rec *recs = n_recs ? malloc(n_recs * sizeof *recs) : NULL;
    if (recs == NULL) recs_lost += n_recs, n_recs = 0;
    for (uint32_t k = 0; k < n_recs; k++) recs[k] = s->late_recs[(s->n_late_recs - n_recs + k) % LATE_RECS];
    s->n_late_recs = 0;
    pthread_mutex_unlock(&s->mu);
    PyObject *seen = PyList_New(0);
    for (int32_t k = 0; seen != NULL && k < n_heard; k++) {
        PyObject *rec = Py_BuildValue("(LLL)", (long long)heard[3 * k], (long long)heard[3 * k + 1],
                                      (long long)heard[3 * k + 2]);
        if (rec == NULL || PyList_Append(seen, rec) < 0) Py_CLEAR(seen);
        Py_XDECREF(rec);
    }
    free(heard);
    PyObject *late = seen == NULL ? NULL : PyList_New(0);
    if (late == NULL) {
        free(recs);
        Py_XDECREF(seen);
        Py_DECREF(bins);
        return NULL;
    }
    for (uint32_t k = 0; k < n_recs; k++) {
        PyObject *rec = Py_BuildValue("(LLL)", (long long)recs[k].slot_mono_ns, (long long)recs[k].late_ns,
                                      (long long)recs[k].held_ns);
        if (rec == NULL || PyList_Append(late, rec) < 0) {
            free(recs);
            Py_XDECREF(rec);
            Py_DECREF(late);
            Py_DECREF(seen);
            Py_DECREF(bins);
            return NULL;
        }
        Py_DECREF(rec);
    }
    free(recs);
    for (int i = 0; i < N_BINS; i++) {
        if (!copy[i]) continue;
        PyObject *pair = Py_BuildValue("(iK)", i, (unsigned long long)copy[i]);
        if (pair == NULL || PyList_Append(bins, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(bins);
            Py_DECREF(late);
            Py_DECREF(seen);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:N,s:K,s:L,s:i,s:N,s:K,s:K,s:L,s:K,s:L,s:L,s:L,s:K,"
                         "s:K,s:K,s:K,s:K,s:K,s:K,s:L,s:N,s:K,s:i,s:k,s:O,s:K,s:L,s:L}",
                         "auth_signed", auth_signed, "auth_failed", auth_failed,
                         "delay_answered", answered, "delay_rate_limited", limited, "handed_off", handed,
                         "handoff_dropped", ho_dropped, "delay_seen", seen,
                         "long_rounds", long_rounds, "long_round_cpu_max_ns", long_cpu, "long_round_packets", long_pkts,
                         "late_syncs", late, "late_over_1ms_woken", over_woken, "wakes_over_1ms", wakes_over,
                         "wake_max_ns", wake_max, "late_over_1ms_held", over_held,
                         "held_max_ns", held_max, "late_pre_max_ns", pre_max, "late_send_max_ns", send_max,
                         "announces", announces,
                         "syncs", syncs, "follow_ups", fups,
                         "send_errors", errors, "timestamps_lost", lost, "batches", batches, "late_count", count,
                         "late_max_ns", max_ns, "late_bins", bins, "late_over_1ms", over, "streams", (int)streams,
                         "awaited", awaited, "realtime", s->realtime ? Py_True : Py_False, "late_syncs_lost", recs_lost,
                         "long_round_lock_ns", long_lock, "lock_wait_max_ns", lock_max);
}

static PyObject *ss_close(SyncSender *s, PyObject *noargs) {
    if (s->started) {
        __atomic_store_n(&s->running, 0, __ATOMIC_RELEASE);
        wake(s);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(s->thread, NULL);
        Py_END_ALLOW_THREADS
        s->started = 0;
    }
    Py_RETURN_NONE;
}

/* SyncSender(event_fd, general_fd, realtime_priority=0, event_port=319, general_port=320): the thread starts at
 * once, inactive and without a map.  realtime_priority > 0 asks for SCHED_FIFO at that priority (granted to root);
 * 0 leaves the thread as it is.  Clients are sent to at the two ports whatever port they sent from, as the port
 * itself does. */
static int ss_init(SyncSender *s, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"event_fd", "general_fd", "realtime_priority", "event_port", "general_port", NULL};
    int event_fd, general_fd, prio = 0, event_port = 319, general_port = 320;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ii|iii", kw, &event_fd, &general_fd, &prio, &event_port,
                                     &general_port))
        return -1;
    if (event_port <= 0 || event_port > 65535 || general_port <= 0 || general_port > 65535) {
        PyErr_SetString(PyExc_ValueError, "ports must be 1..65535");
        return -1;
    }
    if (s->started) {
        PyErr_SetString(PyExc_RuntimeError, "already started");
        return -1;
    }
    s->event_fd = event_fd;
    s->general_fd = general_fd;
    s->event_port = event_port;
    s->general_port = general_port;
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->handoff_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0 || s->handoff_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    /* Priority inheritance: the interpreter's thread holding the lock runs at the sender's priority until it lets
     * go, so no other thread of the host can keep the sender waiting behind it. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT);
    pthread_mutex_init(&s->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    s->running = 1;
    int err = pthread_create(&s->thread, NULL, run, s);
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    s->started = 1;
    pthread_setname_np(s->thread, "ptp-sync");  /* as top -H and /proc/<pid>/task/<tid>/comm show it */
    if (prio > 0) {
        struct sched_param sp = {.sched_priority = prio};
        s->realtime = pthread_setschedparam(s->thread, SCHED_FIFO, &sp) == 0;
    }
    return 0;
}

static void ss_dealloc(SyncSender *s) {
    ss_close(s, NULL);
    ptpauth_free(s->auth);
    if (s->wake_fd > 0) close(s->wake_fd);
    if (s->handoff_fd > 0) close(s->handoff_fd);
    free(s->dclients);
    free(s->dslots);
    free(s->handoffs);
    free(s->streams);
    free(s->heaps[0].items);
    free(s->heaps[1].items);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *ss_handoff_fd(SyncSender *s, PyObject *noargs) {
    return PyLong_FromLong(s->handoff_fd);
}

static PyMethodDef ss_methods[] = {
    {"set_map", (PyCFunction)ss_set_map, METH_VARARGS, "set_map(valid, host_anchor_ns, served_anchor_tai_ns, rate_ppb)"},
    {"set_active", (PyCFunction)ss_set_active, METH_VARARGS, "set_active(bool): Syncs go out only while active"},
    {"add", (PyCFunction)ss_add, METH_VARARGS,
     "add(address, sync_template, follow_up_template, step_ns, first_slot_ns, first_seq) -> index (a Sync stream); "
     "add(address, None, log_interval, step_ns, first_slot_ns, first_seq) -> index (an Announce stream)"},
    {"set_announce", (PyCFunction)ss_set_announce, METH_VARARGS, "set_announce(log_interval, template)"},
    {"remove", (PyCFunction)ss_remove, METH_VARARGS, "remove(index) -> (sent, next_seq, next_slot_ns)"},
    {"take", (PyCFunction)ss_take, METH_NOARGS, "counters and lateness bins since the last take"},
    {"set_delay", (PyCFunction)ss_set_delay, METH_VARARGS, "set_delay(delay_resp_template, rate_per_s, burst)"},
    {"set_security", (PyCFunction)ss_set_security, METH_VARARGS,
     "set_security(spp, key_id, algorithm, secret, allow_mutable) or set_security(None): sign what is sent"},
    {"add_client", (PyCFunction)ss_add_client, METH_VARARGS, "add_client(address, port_identity, log_interval)"},
    {"remove_client", (PyCFunction)ss_remove_client, METH_VARARGS, "remove_client(address, port_identity)"},
    {"take_handoff", (PyCFunction)ss_take_handoff, METH_NOARGS, "[(datagram, address, rx_ns or None)] not answered"},
    {"handoff_fd", (PyCFunction)ss_handoff_fd, METH_NOARGS, "the eventfd readable when take_handoff has some"},
    {"close", (PyCFunction)ss_close, METH_NOARGS, "stop the thread (the sockets stay the caller's)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SyncSenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.edge.ptp._syncsend.SyncSender",
    .tp_basicsize = sizeof(SyncSender),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ss_init,
    .tp_dealloc = (destructor)ss_dealloc,
    .tp_methods = ss_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_syncsend", "native Sync sender", -1, NULL};

PyMODINIT_FUNC PyInit__syncsend(void) {
    if (PyType_Ready(&SyncSenderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&SyncSenderType);
    if (PyModule_AddObject(m, "SyncSender", (PyObject *)&SyncSenderType) < 0) {
        Py_DECREF(&SyncSenderType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "N_BINS", N_BINS);
    return m;
}

