/* _decide.c: the NTP data plane's decisions -- a request's shape, the access rules, the interleaved table, the
 * replies, KoDs, crypto-NAKs, NTS and MAC answers; see _fastpath.c. */
#define PY_SSIZE_T_CLEAN
#include "_fastpath.h"

/* --------------------------------------------------------------------------------------------- addresses */

/* limits.normalize_address: IPv4-mapped IPv6 becomes IPv4.  Returns the family (4 or 6), address in out. */
int client_address(const struct sockaddr_storage *sa, uint8_t out[16], int *port) {
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        memcpy(out, &s4->sin_addr, 4);
        *port = ntohs(s4->sin_port);
        return 4;
    }
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
    const uint8_t *a = (const uint8_t *)&s6->sin6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    *port = ntohs(s6->sin6_port);
    if (memcmp(a, mapped, 12) == 0) { memcpy(out, a + 12, 4); return 4; }
    memcpy(out, a, 16);
    return 6;
}

int prefix_match(const uint8_t *a, const uint8_t *net, int prefix) {
    int full = prefix / 8, rest = prefix % 8;
    if (memcmp(a, net, full) != 0) return 0;
    if (!rest) return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[full] & mask) == (net[full] & mask);
}

/* AccessRules.is_allowed: the table is sorted so the first match is the most specific; no match is denied. */
int is_allowed(FastPath *self, int family, const uint8_t *addr) {
    for (int i = 0; i < self->nrules; i++) {
        access_rule *r = &self->rules[i];
        if (r->family == family && prefix_match(addr, r->net, r->prefix)) return r->allow;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ top clients */

/* SpaceSaving.add(client) of clients.py: a client not held takes over the smallest counter, inheriting its count as
   error.  One pass over TOP_CLIENTS entries, memory fixed whatever the clients do. */
void tc_note(FastPath *self, int family, const uint8_t *addr) {
    int keylen = family == 4 ? 4 : 8, smallest = 0;
    for (int i = 0; i < self->tc_size; i++) {
        tc_entry *e = &self->tc[i];
        if (e->keylen == keylen && memcmp(e->key, addr, keylen) == 0) { e->count++; return; }
        if (e->count < self->tc[smallest].count) smallest = i;
    }
    uint64_t inherited = 0;
    if (self->tc_size < TOP_CLIENTS) smallest = self->tc_size++;
    else inherited = self->tc[smallest].count;
    tc_entry *e = &self->tc[smallest];
    memcpy(e->key, addr, keylen);
    e->keylen = (uint8_t)keylen;
    e->count = inherited + 1;
    e->error = inherited;
}

/* ------------------------------------------------------------------------------- interleaved timestamps */

xl_entry *xl_slot(FastPath *self, uint64_t rx_key) {
    return &self->xl[(rx_key ^ (rx_key >> 29)) * 0x9E3779B97F4A7C15ull >> 32 & self->xl_mask];
}

int64_t xl_take(FastPath *self, uint64_t rx_key) {
    xl_entry *e = xl_slot(self, rx_key);
    if (e->rx_key != rx_key) return 0;
    int64_t tx = e->tx_ns;
    e->rx_key = 0;
    return tx;
}

void xl_put(FastPath *self, uint64_t rx_key, int64_t tx_ns) {
    xl_entry *e = xl_slot(self, rx_key);
    e->rx_key = rx_key;
    e->tx_ns = tx_ns;
}

void xl_update(FastPath *self, uint64_t rx_key, int64_t tx_ns) {
    xl_entry *e = xl_slot(self, rx_key);
    if (e->rx_key == rx_key) e->tx_ns = tx_ns;
}

/* --------------------------------------------------------------------------------------------- replies */

void build_header(uint8_t *out, const uint8_t *req, const clock_map *m, int stratum, int leap, const uint8_t *refid,
                         int poll, uint32_t root_delay, uint32_t root_disp, uint64_t ref_ts, uint64_t origin,
                         uint64_t receive) {
    int version = (req[0] >> 3) & 7;
    out[0] = (uint8_t)((leap & 3) << 6 | version << 3 | 4);
    out[1] = (uint8_t)stratum;
    out[2] = (uint8_t)poll;
    out[3] = (uint8_t)m->precision;
    put32(out + 4, root_delay);
    put32(out + 8, root_disp);
    memcpy(out + 12, refid, 4);
    put64(out + 16, ref_ts);
    put64(out + 24, origin);
    put64(out + 32, receive);
    put64(out + 40, 0);
}

/* A header-only reply, neither sealed, signed, NAK nor interleaved yet, keyed by its receive timestamp. */
static void start_reply(reply *r, uint64_t receive, int kod) {
    r->len = HEADER_LEN;
    r->seal = 0;
    r->sign_key = -1;
    r->crypto_nak = 0;
    r->kod = kod;
    r->interleaved = 0;
    r->want_tx_ts = 0;
    r->rx_key = receive;
}

/* NtpServer._kod */
void make_kod(FastPath *self, reply *r, const uint8_t *req, const clock_map *m, int64_t rx_ns, const char *code, int slot) {
    uint64_t receive = ntp_ts(m, rx_ns) | 1;
    build_header(r->data, req, m, 0, 3, (const uint8_t *)code, (int8_t)req[2], 0, 0, 0, get64(req + 40), receive);
    start_reply(r, receive, 1);
    self->counters[slot]++;
    self->counters[C_REPLIES]++;
}

/* A reply.  `xleave`: 0 for a crypto-NAK, which is never interleaved nor asks for its transmit timestamp. */
void make_reply(FastPath *self, reply *r, const uint8_t *req, const clock_map *m, int64_t rx_ns, int xleave) {
    uint64_t receive = ntp_ts(m, rx_ns) | 1;
    int req_poll = (int8_t)req[2];
    int poll = req_poll > m->poll_min ? req_poll : m->poll_min;
    uint64_t origin = get64(req + 24), req_receive = get64(req + 32), req_transmit = get64(req + 40);
    build_header(r->data, req, m, m->stratum, m->leap, m->refid, poll, m->root_delay, m->root_dispersion,
                 m->reference_ts, req_transmit, receive);
    start_reply(r, receive, 0);
    int version = (req[0] >> 3) & 7;
    /* Reply.wants_tx_timestamp: a client whose origin is one of our receive timestamps is in the interleaved mode
       and will want this reply's kernel transmit timestamp next time; nobody else does, and asking the kernel for
       every reply's timestamp would cost an error-queue message per packet. */
    r->want_tx_ts = xleave && version == 4 && (origin & 1);
    if (xleave && version == 4 && (origin & 1) && req_receive != req_transmit) {
        int64_t tx_ns = xl_take(self, origin);
        if (tx_ns) {
            r->interleaved = 1;
            put64(r->data + 24, req_receive);  /* the client recognises interleaved replies by this echo */
            put64(r->data + 40, ntp_ts(m, tx_ns) & ~(uint64_t)1);
            self->counters[C_INTERLEAVED]++;
        }
    }
    self->counters[C_REPLIES]++;
}

/* NtpServer._trailer_ok: a MAC in a layout auth.split_mac recognises, or NTPv4 extension fields tiling the rest
 * (RFC 7822 §7.5: each at least 16 bytes and a multiple of 4). */
int trailer_ok(const uint8_t *d, ssize_t len, int version) {
    ssize_t trailer = len - HEADER_LEN;
    if (trailer == 20 || trailer == 24) return 1;
    static const uint8_t zero_key_id[4] = {0, 0, 0, 0};  /* a crypto-NAK */
    if (trailer == 4 && memcmp(d + HEADER_LEN, zero_key_id, 4) == 0) return 1;
    if (version != 4) return 0;
    for (ssize_t pos = HEADER_LEN; pos < len;) {
        if (len - pos < 16) return 0;
        ssize_t field = (ssize_t)d[pos + 2] << 8 | d[pos + 3];
        if (field < 16 || field % 4 || pos + field > len) return 0;
        pos += field;
    }
    return 1;
}

/* NtpServer._shape: 0 acceptable, else the counter slot of the drop. */
int shape(const uint8_t *d, ssize_t len, int port) {
    if (len < HEADER_LEN) return C_DROP_SHORT;
    if (len > MAX_REQUEST_LEN) return C_DROP_OVERSIZE;
    if (len % 4) return C_DROP_MALFORMED;
    int version = (d[0] >> 3) & 7, mode = d[0] & 7;
    if (version < 1 || version > 4) return C_DROP_BAD_VERSION;
    if (mode == 6 || mode == 7) return C_DROP_CONTROL;
    int v1_client = version == 1 && mode == 0 && port != 123;
    if (mode != 3 && !v1_client) return C_DROP_MODE;
    if (len > HEADER_LEN && !trailer_ok(d, len, version)) return C_DROP_MALFORMED;
    return 0;
}

/* NTS (RFC 8915), for an NTPv4 request with a Unique Identifier while cookie keys are held: 1 r is its reply (an
 * NTS reply sealed later, once its header is final), 0 dropped (counted).  As there, an
 * authenticated request over the rate gets a KoD RATE that still carries fresh cookies, and a NAK is a KoD NTSN
 * with the Unique Identifier alone. */
int nts_answer(FastPath *self, reply *r, int slot, const uint8_t *d, ssize_t len, const clock_map *m,
                      int64_t rx_ns, int limit) {
    nts_request rq;
    switch (nts_open(self->nts, d, (size_t)len, &rq)) {
    case NTS_DROP_MALFORMED: self->counters[C_DROP_NTS_MALFORMED]++; return 0;
    case NTS_DROP_REPLAY: self->counters[C_DROP_NTS_REPLAY]++; return 0;
    case NTS_NAK:
        make_kod(self, r, d, m, rx_ns, "NTSN", C_NTS_NAK);
        r->len = HEADER_LEN + nts_nak_fields(&rq, r->data + HEADER_LEN);
        return 1;
    case NTS_OK: break;
    default: return 0;  /* no random bytes for its cookies: no reply */
    }
    size_t reply_len = nts_prepare_reply(self->nts, slot, &rq, r->data);
    if (!reply_len) return 0;  /* libcrypto failed: no reply rather than an unauthenticated one */
    if (limit == 1) {
        make_kod(self, r, d, m, rx_ns, "RATE", C_KOD_RATE);
    } else {
        make_reply(self, r, d, m, rx_ns, 1);
        self->counters[C_NTS]++;
    }
    r->len = reply_len;
    r->seal = 1;
    return 1;
}

int nts_decides(FastPath *self, const uint8_t *d, ssize_t len) {
    return nts_key_count(self->nts) && ((d[0] >> 3) & 7) == 4 && nts_is_nts(d, (size_t)len);
}

/* A request with a MAC (RFC 5905 §9.2): a crypto-NAK when it does not verify (over the rate or not), else a reply
 * (or KoD RATE) signed with the request's key; a crypto-NAK request or unknown extension fields: unauthenticated. */
void mac_answer(FastPath *self, reply *r, const uint8_t *d, ssize_t len, const clock_map *m, int64_t rx_ns,
                       int limit) {
    int key = -1;
    int verdict = auth_verify(self->auth, d, (size_t)len, &key);
    if (verdict == AUTH_FAIL) {
        make_reply(self, r, d, m, rx_ns, 0);
        memset(r->data + HEADER_LEN, 0, 4);
        r->len = HEADER_LEN + 4;
        r->crypto_nak = 1;
        self->counters[C_CRYPTO_NAK]++;
        return;
    }
    if (limit == 1) make_kod(self, r, d, m, rx_ns, "RATE", C_KOD_RATE);
    else make_reply(self, r, d, m, rx_ns, 1);
    if (verdict == AUTH_OK) {
        r->sign_key = key;
        self->counters[C_AUTHENTICATED]++;
    }
}

/* clockmap.not_ready: before the appliance has published a map, the host clock advertised as unsynchronized. */
void not_ready(clock_map *m, int64_t host_ns) {
    memset(m, 0, sizeof(*m));
    m->leap = 3;
    m->stratum = 16;
    m->precision = -20;
    m->root_dispersion = 0xFFFFFFFFu;
    memcpy(m->refid, "INIT", 4);
    m->host_anchor_ns = host_ns;
    m->tai_utc_s = 37;
    m->served_anchor_tai_ns = host_ns + (int64_t)m->tai_utc_s * NS_PER_S;
}

