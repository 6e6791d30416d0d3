/*
 * _fastpath: the NTP data plane.  recvmmsg / decide / sendmmsg, with kernel timestamps.
 *
 * Every NTP serving decision is made in this extension and only here: the shape of a request (a MAC or
 * extension-field trailer included), the access rules, the per-client rate limit (bucket.h), the answer (basic or
 * interleaved, KoDs, the crypto-NAK: _decide.c), symmetric-key MACs (_auth.c) and NTS (RFC 8915, _nts.c: cookies,
 * authenticator, NAK, replay table).  This file is the I/O loop (recvmmsg, the error queue, sendmmsg) and the
 * Python type.  Python hands
 * it a policy and never re-decides: the clock map (appliance/protocol/clockmap.py, published in shared memory by
 * appliance/edge/ntp/shm.py and read under its sequence counter), the access table and rate limit
 * (appliance/protocol/limits.py parses them), the keys file's keys and the NTS cookie master keys.  The rate limiter
 * and access rules follow limits.py's docstring line by line; tests/oracle/ntp_server.py is the executable model
 * the differential and fuzz tests hold the data plane to.  Counters: kept here, published by fast.py.
 */
#define PY_SSIZE_T_CLEAN
#include "_fastpath.h"

/* ----------------------------------------------------------------------------------------- time conversions */

/* The map, and whether it is published and valid.  When no consistent copy can be had (the publisher is mid-update
   and, sharing this CPU, cannot finish while we spin) the last consistent one stands, as ClockReader.read keeps its
   last: before, the whole batch went to the Python path, which then answered from that same last map. */
static int read_map(FastPath *self, clock_map *out) {
    const uint8_t *base = (const uint8_t *)self->shm.buf;
    const uint64_t *seq = (const uint64_t *)(base + SEQ_OFFSET);
    for (int i = 0; i < 1000; i++) {
        uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (s1 & 1) continue;
        memcpy(out, base + MAP_OFFSET, sizeof(*out));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(seq, __ATOMIC_ACQUIRE) == s1) {
            self->last_map = *out;
            self->last_map_ok = s1 != 0 && out->valid;
            return self->last_map_ok;
        }
    }
    *out = self->last_map;
    return self->last_map_ok;
}

static int64_t host_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static int64_t rx_timestamp(struct msghdr *mh) { return ks_timestamp_ns(mh); }

static void drain_errqueue(FastPath *self, int force) {
    /* More than a batch sends: a backlog on the error queue would take receive buffer space from requests.  Without
       `force` (serve starting) the queue is only read while timestamps are outstanding: a syscall saved per batch. */
    if (self->pending_tx > TX_RING) self->pending_tx = 0;  /* lost in an overflowing queue: they will never come */
    for (int round = 0; round < 2 * BATCH && (force || self->pending_tx); round++) {
        int64_t tx_ns = 0;
        uint32_t id = 0;
        int got = ks_read_tx(self->fd, &tx_ns, &id);
        if (got < 0) return;
        if (self->pending_tx) self->pending_tx--;
        if (!got) continue;
        uint64_t key = self->tx_ring[id % TX_RING];
        if (!key) continue;
        xl_update(self, key, tx_ns);
        self->tx_ring[id % TX_RING] = 0;
        self->counters[C_TX_KERNEL_TS]++;
    }
}

/* replies[from..to): transmit timestamps, as late as they can be read, then one sendmmsg.  An NTS reply's header
 * is authenticated, so its own is read just before its seal; the others share one read after the last seal. */
static void send_replies(FastPath *self, reply *replies, int from, int to, const clock_map *map,
                         struct sockaddr_storage *addrs, struct mmsghdr *msgs) {
    static char tx_ctrl[BATCH][CMSG_SPACE(sizeof(uint32_t))];
    struct mmsghdr out[BATCH];
    struct iovec out_iov[BATCH];
    reply *sent_replies[BATCH];
    for (int i = from; i < to; i++) {
        reply *r = &replies[i];
        if (!r->seal) continue;
        r->tx_ns = host_now_ns();
        if (!r->interleaved) put64(r->data + 40, ntp_ts(map, r->tx_ns) & ~(uint64_t)1);
        if (nts_seal_reply(self->nts, i, r->data)) r->len = 0;  /* not sent */
    }
    int64_t tx_ns = host_now_ns();
    uint64_t tx_ts = ntp_ts(map, tx_ns) & ~(uint64_t)1;
    int nsend = 0;
    for (int i = from; i < to; i++) {
        reply *r = &replies[i];
        if (!r->seal) {
            r->tx_ns = tx_ns;
            if (!r->interleaved) put64(r->data + 40, tx_ts);
            if (r->sign_key >= 0) r->len = auth_sign(self->auth, r->sign_key, r->data);  /* 0: not sent */
        }
        if (!r->len) continue;
        out_iov[nsend].iov_base = r->data;
        out_iov[nsend].iov_len = r->len;
        memset(&out[nsend].msg_hdr, 0, sizeof(out[nsend].msg_hdr));
        out[nsend].msg_hdr.msg_iov = &out_iov[nsend];
        out[nsend].msg_hdr.msg_iovlen = 1;
        out[nsend].msg_hdr.msg_name = &addrs[r->addr];
        out[nsend].msg_hdr.msg_namelen = msgs[r->addr].msg_hdr.msg_namelen;
        if (r->want_tx_ts) {  /* ask for this datagram's transmit timestamp (and an OPT_ID) only */
            out[nsend].msg_hdr.msg_control = tx_ctrl[nsend];
            out[nsend].msg_hdr.msg_controllen = sizeof(tx_ctrl[nsend]);
            struct cmsghdr *c = CMSG_FIRSTHDR(&out[nsend].msg_hdr);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SO_TIMESTAMPING;
            c->cmsg_len = CMSG_LEN(sizeof(uint32_t));
            uint32_t flags = SOF_TIMESTAMPING_TX_SOFTWARE;
            memcpy(CMSG_DATA(c), &flags, sizeof(flags));
        }
        sent_replies[nsend++] = r;
    }
    int sent = 0;
    while (sent < nsend) {
        int k = sendmmsg(self->fd, out + sent, nsend - sent, 0);
        if (k <= 0) { if (errno == EINTR) continue; sent++; continue; }
        sent += k;
    }
    for (int i = 0; i < nsend; i++) {
        reply *r = sent_replies[i];
        if (!r->kod && !r->crypto_nak) xl_put(self, r->rx_key, r->tx_ns);
        if (!r->want_tx_ts) continue;  /* the kernel numbers only the datagrams that asked for a timestamp */
        self->tx_ring[self->next_id % TX_RING] = r->rx_key;
        self->next_id++;
        self->pending_tx++;
    }
}

/* One batch: receive up to BATCH, decide, answer.  Returns datagrams read, -1 when none (errno: EAGAIN when none
 * came, EINTR...).  `wait`: the socket is blocking (serve's), and recvmmsg waits for the first datagram (up to
 * SO_RCVTIMEO) without the GIL, then takes what is there with it. */
static int serve_batch(FastPath *self, int wait) {
    static uint8_t bufs[BATCH][RECV_SIZE];
    static char ctrls[BATCH][256];
    static struct sockaddr_storage addrs[BATCH];
    static struct mmsghdr msgs[BATCH];
    static struct iovec iovs[BATCH];
    static int changed = BATCH;  /* headers the last recvmmsg filled in (all, before the first) */
    for (int i = 0; i < changed; i++) {
        iovs[i].iov_base = bufs[i];
        iovs[i].iov_len = RECV_SIZE;
        memset(&msgs[i].msg_hdr, 0, sizeof(msgs[i].msg_hdr));
        msgs[i].msg_hdr.msg_iov = &iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_name = &addrs[i];
        msgs[i].msg_hdr.msg_namelen = sizeof(addrs[i]);
        msgs[i].msg_hdr.msg_control = ctrls[i];
        msgs[i].msg_hdr.msg_controllen = sizeof(ctrls[i]);
    }
    int n;
    if (wait) {
        Py_BEGIN_ALLOW_THREADS
        n = recvmmsg(self->fd, msgs, BATCH, MSG_WAITFORONE, NULL);
        Py_END_ALLOW_THREADS
    } else {
        n = recvmmsg(self->fd, msgs, BATCH, MSG_DONTWAIT, NULL);
    }
    changed = n > 0 ? n : 1;  /* an error may still have touched the first */
    if (n <= 0) return -1;
    /* Transmit timestamps of replies sent before the wait, come since (poll's POLLERR before): first, for an
       interleaved request of this batch that asks for one. */
    if (self->pending_tx) drain_errqueue(self, 0);
    clock_map map;
    if (!read_map(self, &map)) not_ready(&map, host_now_ns());
    static reply replies[BATCH];
    int nout = 0, flushed = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *d = bufs[i];
        ssize_t len = msgs[i].msg_len;
        if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) len = RECV_SIZE + 1;
        int64_t rx_ns = rx_timestamp(&msgs[i].msg_hdr);
        if (!rx_ns) { self->counters[C_RX_NO_TS]++; rx_ns = host_now_ns(); }
        uint8_t addr[16];
        int port;
        int family = client_address(&addrs[i], addr, &port);
        int dropped = shape(d, len, port);
        self->counters[C_REQUESTS]++;
        tc_note(self, family, addr);
        if (dropped) { self->counters[dropped]++; continue; }
        reply *r = &replies[nout];
        if (!is_allowed(self, family, addr)) {
            if (self->deny_action == DENY_DROP) { self->counters[C_DROP_DENIED]++; continue; }
            make_kod(self, r, d, &map, rx_ns, self->deny_action == DENY_KOD_DENY ? "DENY" : "RSTR",
                     self->deny_action == DENY_KOD_DENY ? C_KOD_DENY : C_KOD_RSTR);
        } else {
            int limit = rt_check(&self->limiter, addr, family == 4 ? 4 : 8, rx_ns);  /* an IPv4 address, an IPv6 /64 */
            if (limit == 2) { self->counters[C_DROP_RATE_LIMITED]++; continue; }
            if (len != HEADER_LEN && nts_decides(self, d, len)) {
                if (!nts_answer(self, r, nout, d, len, &map, rx_ns, limit)) continue;
            } else if (len != HEADER_LEN) {
                mac_answer(self, r, d, len, &map, rx_ns, limit);
            } else if (limit == 1) {
                make_kod(self, r, d, &map, rx_ns, "RATE", C_KOD_RATE);
            } else {
                make_reply(self, r, d, &map, rx_ns, 1);
            }
        }
        r->addr = i;
        nout++;
        if (nout - flushed == SEND_CHUNK) {  /* the client can start on these while the rest are worked out */
            send_replies(self, replies, flushed, nout, &map, addrs, msgs);
            flushed = nout;
        }
    }
    if (nout > flushed) send_replies(self, replies, flushed, nout, &map, addrs, msgs);
    return n;
}

/* ------------------------------------------------------------------------------------------ Python type */

/* serve's wait is recvmmsg's: the socket, non-blocking as the worker opened it, is made blocking while serve runs,
   with SO_RCVTIMEO as the quiet timeout, so that a wake-up is one system call (recvmmsg, MSG_WAITFORONE) rather
   than poll then recvmmsg.  Returns the file status flags to restore (-1 on failure, errno set). */
static int begin_wait(FastPath *self, int timeout_ms) {
    if (timeout_ms != self->wait_ms) {
        struct timeval tv = {0, 0};  /* 0: no timeout (timeout_ms < 0, as poll's) */
        if (timeout_ms > 0) { tv.tv_sec = timeout_ms / 1000; tv.tv_usec = (timeout_ms % 1000) * 1000; }
        if (setsockopt(self->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) return -1;
        self->wait_ms = timeout_ms;
    }
    int flags = fcntl(self->fd, F_GETFL);
    if (flags < 0 || ((flags & O_NONBLOCK) && fcntl(self->fd, F_SETFL, flags & ~O_NONBLOCK) < 0)) return -1;
    return flags;
}

static void end_wait(FastPath *self, int flags) {
    if (flags & O_NONBLOCK) fcntl(self->fd, F_SETFL, flags);
}

/* Serve until `budget_ms` has passed (so Python can publish counters and notice a stop), or the socket stays quiet
   for `timeout_ms` (0: only what has arrived; < 0: no limit): one
   recvmmsg that waits per drained socket, and in between whole batches of recvmmsg/sendmmsg without returning to
   Python.  The error queue is read first (what poll's POLLERR would have said), then after every batch while
   transmit timestamps are outstanding. */
static PyObject *fp_serve(FastPath *self, PyObject *args) {
    int timeout_ms = 200, budget_ms = 200;
    if (!PyArg_ParseTuple(args, "|ii", &timeout_ms, &budget_ms)) return NULL;
    int64_t deadline = host_now_ns() + (int64_t)budget_ms * 1000000;
    long long read = 0;
    int wait = timeout_ms != 0, flags = 0;
    if (wait && (flags = begin_wait(self, timeout_ms)) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    drain_errqueue(self, 1);
    for (;;) {
        int n = serve_batch(self, wait);
        if (n < 0) break;  /* quiet for timeout_ms, a signal, or an error for the caller to see next time */
        read += n;
        drain_errqueue(self, 0);
        while (n == BATCH) {
            n = serve_batch(self, 0);
            if (n > 0) read += n;
            drain_errqueue(self, 0);
        }
        if (host_now_ns() >= deadline) break;
    }
    if (wait) end_wait(self, flags);
    return PyLong_FromLongLong(read);
}

/* The symmetric keys of the keys file: [(key id, type, secret)], type 1 MD5, 2 SHA1, 3 AES128 (AES-CMAC).  Replaces
   the keys held before; [] holds none (every MAC then earns a crypto-NAK). */
static PyObject *fp_set_keys(FastPath *self, PyObject *keys) {
    auth_keys *fresh = auth_new();
    if (!fresh) return PyErr_Format(PyExc_RuntimeError, "NTP keys: libcrypto's CMAC unavailable");
    Py_ssize_t n = PySequence_Size(keys);
    if (n < 0) { auth_free(fresh); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PySequence_GetItem(keys, i);
        unsigned long id;
        int type;
        const char *secret;
        Py_ssize_t len;
        int ok = row && PyArg_ParseTuple(row, "kiy#", &id, &type, &secret, &len);
        Py_XDECREF(row);
        if (!ok) { auth_free(fresh); return NULL; }
        if (id > 0xFFFFFFFFul || auth_add(fresh, (uint32_t)id, type, (const uint8_t *)secret, (size_t)len)) {
            auth_free(fresh);
            return PyErr_Format(PyExc_ValueError, "key %zd: an id 1..65534 held once, a type 1..3 and a secret of "
                                "1..%d bytes (16 for AES128)", i, AUTH_MAX_SECRET);
        }
    }
    auth_free(self->auth);
    self->auth = fresh;
    Py_RETURN_NONE;
}

static PyObject *fp_counters(FastPath *self, PyObject *noargs) {
    PyObject *t = PyTuple_New(C_COUNT);
    for (int i = 0; i < C_COUNT; i++) PyTuple_SET_ITEM(t, i, PyLong_FromUnsignedLongLong(self->counters[i]));
    return t;
}

static PyObject *fp_limiter(FastPath *self, PyObject *noargs) {
    return Py_BuildValue("(KK)", (unsigned long long)self->limiter.size, (unsigned long long)self->limiter.evictions);
}

static PyObject *fp_take_clients(FastPath *self, PyObject *noargs) {
    PyObject *out = PyList_New(self->tc_size);
    if (!out) return NULL;
    for (int i = 0; i < self->tc_size; i++) {
        tc_entry *e = &self->tc[i];
        PyObject *item = Py_BuildValue("(y#KK)", (const char *)e->key, (Py_ssize_t)e->keylen,
                                       (unsigned long long)e->count, (unsigned long long)e->error);
        if (!item) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, item);
    }
    self->tc_size = 0;
    return out;
}

/* The NTS cookie master keys, oldest first: [(key id, key bytes)], all of one length (an empty list: none, NTS
   requests are then answered as plain NTP, which an NTS client rejects).  Replaces the keys held before; the table of recent Unique Identifiers stays. */
static PyObject *fp_set_cookie_keys(FastPath *self, PyObject *keys) {
    uint32_t ids[NTS_MAX_KEYS];
    uint8_t material[NTS_MAX_KEYS * 64];
    Py_ssize_t n = PySequence_Size(keys), keylen = 0;
    if (n < 0) return NULL;
    if (n > NTS_MAX_KEYS) return PyErr_Format(PyExc_ValueError, "at most %d cookie keys", NTS_MAX_KEYS);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PySequence_GetItem(keys, i);
        unsigned long id;
        const char *key;
        Py_ssize_t len;
        int ok = row && PyArg_ParseTuple(row, "ky#", &id, &key, &len);
        Py_XDECREF(row);
        if (!ok) return NULL;
        if ((len != 32 && len != 48 && len != 64) || (i && len != keylen) || id > 0xFFFFFFFFul)
            return PyErr_Format(PyExc_ValueError, "cookie key %zd: a 32-bit id and 32, 48 or 64 bytes, all alike", i);
        keylen = len;
        ids[i] = (uint32_t)id;
        memcpy(material + i * len, key, len);
    }
    int failed = nts_set_keys(self->nts, (int)n, ids, material, (size_t)keylen);
    memset(material, 0, sizeof(material));
    if (failed) return PyErr_Format(PyExc_RuntimeError, "NTS: libcrypto refused the cookie keys");
    Py_RETURN_NONE;
}

static int fp_init(FastPath *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"fd", "shm", "rules", "deny_action", "rate_per_s", "burst", "max_clients", "interleaved_table",
                         "nts_replay_table", NULL};
    PyObject *shm_obj, *rules;
    int interleaved = 65536, replay_table = 65536, burst, max_clients;
    double rate_per_s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOOidii|ii", kw, &self->fd, &shm_obj, &rules, &self->deny_action,
                                     &rate_per_s, &burst, &max_clients, &interleaved, &replay_table))
        return -1;
    if (replay_table < 0) { PyErr_SetString(PyExc_ValueError, "nts_replay_table must be >= 0"); return -1; }
    self->nts = nts_new((uint32_t)replay_table);
    self->auth = auth_new();
    if (!self->nts || !self->auth) {
        PyErr_SetString(PyExc_RuntimeError, "libcrypto's AES-SIV, CMAC or getrandom() unavailable");
        return -1;
    }
    if (PyObject_GetBuffer(shm_obj, &self->shm, PyBUF_SIMPLE) < 0) return -1;
    if (self->shm.len < MAP_OFFSET + (Py_ssize_t)sizeof(clock_map)) {
        PyErr_SetString(PyExc_ValueError, "shared memory too small for a clock map");
        return -1;
    }
    Py_ssize_t nr = PySequence_Size(rules);
    if (nr < 0) return -1;
    self->rules = PyMem_Calloc(nr ? nr : 1, sizeof(access_rule));
    self->nrules = (int)nr;
    for (Py_ssize_t i = 0; i < nr; i++) {
        PyObject *row = PySequence_GetItem(rules, i);
        int family, prefix, allow;
        const char *net;
        Py_ssize_t netlen;
        if (!row || !PyArg_ParseTuple(row, "iy#ip", &family, &net, &netlen, &prefix, &allow)) { Py_XDECREF(row); return -1; }
        self->rules[i].family = family;
        memcpy(self->rules[i].net, net, netlen > 16 ? 16 : netlen);
        self->rules[i].prefix = prefix;
        self->rules[i].allow = allow;
        Py_DECREF(row);
    }
    if (max_clients < 1 || max_clients > (1 << 24) || burst < 1 || !(rate_per_s >= 0)) {
        PyErr_SetString(PyExc_ValueError, "bad rate limit");
        return -1;
    }
    if (rt_init(&self->limiter, rate_per_s, burst, max_clients)) { PyErr_NoMemory(); return -1; }
    uint32_t xl_size = 1;
    while (xl_size < (uint32_t)interleaved) xl_size <<= 1;
    self->xl = PyMem_Calloc(xl_size, sizeof(xl_entry));
    self->xl_mask = xl_size - 1;
    if (!self->xl || !self->rules) { PyErr_NoMemory(); return -1; }
    self->wait_ms = -2;
    fesetround(FE_TONEAREST);
    return 0;
}

static void fp_dealloc(FastPath *self) {
    if (self->shm.obj) PyBuffer_Release(&self->shm);
    PyMem_Free(self->rules);
    rt_free(&self->limiter);
    PyMem_Free(self->xl);
    nts_free(self->nts);
    auth_free(self->auth);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef fp_methods[] = {
    {"serve", (PyCFunction)fp_serve, METH_VARARGS,
     "serve([timeout_ms, budget_ms]) -> datagrams read: until the socket is quiet for timeout_ms or budget_ms passed"},
    {"set_keys", (PyCFunction)fp_set_keys, METH_O,
     "set_keys([(key_id, type, secret)]): the symmetric keys (type 1 MD5, 2 SHA1, 3 AES128); [] none"},
    {"counters", (PyCFunction)fp_counters, METH_NOARGS, "the fast path's counters, in shm.COUNTER_NAMES order"},
    {"limiter", (PyCFunction)fp_limiter, METH_NOARGS, "(clients tracked, evictions)"},
    {"take_clients", (PyCFunction)fp_take_clients, METH_NOARGS,
     "[(client key, requests, error)] of the busiest clients since the last call, which starts the count again"},
    {"set_cookie_keys", (PyCFunction)fp_set_cookie_keys, METH_O,
     "set_cookie_keys([(key_id, key)]): the NTS cookie master keys, oldest first (the last seals); [] none"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.edge.ntp._fastpath.FastPath",
    .tp_basicsize = sizeof(FastPath),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fp_init,
    .tp_dealloc = (destructor)fp_dealloc,
    .tp_methods = fp_methods,
    .tp_doc = "The NTP worker's native receive/answer loop.",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath", "NTP fast path", -1, NULL};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&FastPathType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&FastPathType);
    if (PyModule_AddObject(m, "FastPath", (PyObject *)&FastPathType) < 0) return NULL;
    PyModule_AddIntConstant(m, "COUNTERS", C_COUNT);
    PyModule_AddIntConstant(m, "NTS", 1);  /* NTS requests answered here while cookie keys are held */
    return m;
}
