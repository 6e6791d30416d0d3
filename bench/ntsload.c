/*
 * ntsload: a closed-loop load generator and reply validator of NTS-authenticated NTPv4 (RFC 8915) for the NTS
 * throughput benchmark (bench/nts_throughput.py), the NTS counterpart of bench/ntpload.c.
 *
 *   ntsload -k KEYFILE -h 127.0.0.1 -p 11123 -d 5 -w 32 [-t 200] [-a 8]
 *   ntsload -k KEYFILE -h 127.0.0.1 -p 11123 -d 5 -r 50000 [-B 1] [-w 1024] [-t 200] [-a 8]
 *   ntsload -k KEYFILE -X 10            print 10 requests in hex, one a line (no network: for the unit test)
 *   ntsload -k KEYFILE -Y               read "REQUEST_HEX REPLY_HEX" lines, print a verdict a line (unit test)
 *
 * KEYFILE holds what one NTS-KE session gave: "c2s HEX", "s2c HEX" (32-byte AEAD_AES_SIV_CMAC_256 keys) and one
 * "cookie HEX" line per cookie (up to 8), used in turn.  Every request is built here: NTPv4 mode 3 whose transmit
 * timestamp is a serial number (replies are matched by their origin), a fresh 32-byte Unique Identifier, one cookie
 * and an NTS Authenticator (fresh 16-byte nonce) over everything before it, AES-SIV with the nonce as the last
 * associated-data component.  OpenSSL 3.0's EVP "AES-128-SIV" computes no tag for an empty plaintext (which an NTS
 * request without encrypted fields is), so S2V is done here with AES-CBC as CMAC (RFC 4493, RFC 5297).
 *
 * A reply is valid when it is mode 4, not a kiss-o'-death, its origin is the request's transmit timestamp, its
 * receive and transmit timestamps are non-zero, its extension fields tile the packet, it echoes the request's
 * Unique Identifier and ends in an NTS Authenticator; every -a'th valid reply (1: all) has that authenticator
 * decrypted with the S2C key and checked (the rest are not, so that the generator stays far cheaper than the
 * server it measures).  An NTS NAK (KoD NTSN) is counted apart, as are other KoDs, stale replies (to a request
 * already given up as lost) and each kind of invalid reply.  Load runs keep W requests in flight on one UDP
 * socket, as ntpload does (replies read 64 at a time, replacements sent with one sendmmsg; a request unanswered
 * after the timeout counts as lost and is replaced).  Prints one JSON line.
 *
 * With -r RATE it offers a fixed load instead, as ntpload -r does (open loop, for bench/ntp_cost.py): a request
 * every 1/RATE s (or -B together every B/RATE s), up to -w in flight (a request due while all are in flight is
 * skipped and counted), replies read between sends, and after -d seconds the requests still in flight waited for
 * (up to the timeout), so that every request is either answered or lost.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loadcommon.h"

#define MAXW 1024
#define BATCH 64
#define LATE_NS 1000000  /* -r: a request this late is not sent (the generator fell behind) */
#define MAX_COOKIES 8
#define MAX_COOKIE_LEN 256
#define UID_LEN 32
#define NONCE_LEN 16
#define MAX_PKT 1024
#define EF_UNIQUE_ID 0x0104
#define EF_COOKIE 0x0204
#define EF_AUTHENTICATOR 0x0404

/* --- AES-SIV (RFC 5297) over AES-128: CMAC by AES-CBC with a zero IV, CTR for the encrypted part ----------------- */

typedef struct {
    EVP_CIPHER_CTX *cbc;  /* K1 (the key's first half): S2V */
    EVP_CIPHER_CTX *ctr;  /* K2 (its second half): the encryption */
    uint8_t k1a[16], k1b[16];  /* CMAC subkeys */
    uint8_t d0[16];  /* CMAC(K1, 0^128): S2V's first value, the same for every message */
} siv_t;

static uint8_t scratch[MAX_PKT + 64];

static void dbl(uint8_t b[16]) {
    uint8_t carry = b[0] >> 7;
    for (int i = 0; i < 15; i++) b[i] = (uint8_t)(b[i] << 1 | b[i + 1] >> 7);
    b[15] = (uint8_t)(b[15] << 1) ^ (carry ? 0x87 : 0);
}

static void cbc_mac(siv_t *s, const uint8_t *blocks, size_t len, uint8_t out[16]) {
    static const uint8_t zero[16];
    static uint8_t cbc_out[MAX_PKT + 64];
    int outl = 0;
    EVP_EncryptInit_ex(s->cbc, NULL, NULL, NULL, zero);
    EVP_EncryptUpdate(s->cbc, cbc_out, &outl, blocks, (int)len);
    memcpy(out, cbc_out + len - 16, 16);
}

/* CMAC (RFC 4493) of msg, len <= MAX_PKT */
static void cmac(siv_t *s, const uint8_t *msg, size_t len, uint8_t out[16]) {
    size_t n = len ? (len + 15) / 16 : 1;
    int complete = len && len % 16 == 0;
    memcpy(scratch, msg, len);
    if (!complete) {
        memset(scratch + len, 0, n * 16 - len);
        scratch[len] = 0x80;
    }
    const uint8_t *k = complete ? s->k1a : s->k1b;
    for (int i = 0; i < 16; i++) scratch[(n - 1) * 16 + i] ^= k[i];
    cbc_mac(s, scratch, n * 16, out);
}

typedef struct { const uint8_t *p; size_t len; } part_t;

/* S2V of the associated-data components ad[0..nad-1] and the plaintext */
static void s2v(siv_t *s, const part_t *ad, int nad, const uint8_t *plain, size_t plen, uint8_t v[16]) {
    uint8_t d[16], m[16];
    memcpy(d, s->d0, 16);
    for (int i = 0; i < nad; i++) {
        cmac(s, ad[i].p, ad[i].len, m);
        dbl(d);
        for (int j = 0; j < 16; j++) d[j] ^= m[j];
    }
    static uint8_t t[MAX_PKT];
    if (plen >= 16) {  /* T = plaintext xorend D */
        memcpy(t, plain, plen);
        for (int j = 0; j < 16; j++) t[plen - 16 + j] ^= d[j];
        cmac(s, t, plen, v);
    } else {  /* T = dbl(D) xor pad(plaintext): one complete block */
        dbl(d);
        memset(t, 0, 16);
        if (plen) memcpy(t, plain, plen);
        t[plen] = 0x80;
        for (int j = 0; j < 16; j++) t[j] ^= d[j];
        cmac(s, t, 16, v);
    }
}

static int siv_init(siv_t *s, const uint8_t key[32]) {
    static const uint8_t zero[16];
    s->cbc = EVP_CIPHER_CTX_new();
    s->ctr = EVP_CIPHER_CTX_new();
    if (!s->cbc || !s->ctr || !EVP_EncryptInit_ex(s->cbc, EVP_aes_128_cbc(), NULL, key, zero) ||
        !EVP_EncryptInit_ex(s->ctr, EVP_aes_128_ctr(), NULL, key + 16, zero))
        return -1;
    EVP_CIPHER_CTX_set_padding(s->cbc, 0);
    uint8_t l[16];
    cbc_mac(s, zero, 16, l);  /* L = AES(K1, 0) */
    memcpy(s->k1a, l, 16);
    dbl(s->k1a);
    memcpy(s->k1b, s->k1a, 16);
    dbl(s->k1b);
    cmac(s, zero, 16, s->d0);
    return 0;
}

/* the 16-byte tag of an empty plaintext (the ciphertext is the tag alone) */
static void siv_seal_empty(siv_t *s, const part_t *ad, int nad, uint8_t tag[16]) {
    s2v(s, ad, nad, NULL, 0, tag);
}

/* decrypt ct (tag || encrypted, ctlen >= 16) into plain; 0 when the tag verifies */
static int siv_open(siv_t *s, const part_t *ad, int nad, const uint8_t *ct, size_t ctlen, uint8_t *plain) {
    if (ctlen < 16 || ctlen - 16 > MAX_PKT) return -1;
    uint8_t q[16], v[16];
    memcpy(q, ct, 16);
    q[8] &= 0x7f;
    q[12] &= 0x7f;
    int outl = 0;
    size_t plen = ctlen - 16;
    if (plen) {
        EVP_EncryptInit_ex(s->ctr, NULL, NULL, NULL, q);
        EVP_EncryptUpdate(s->ctr, plain, &outl, ct + 16, (int)plen);
    }
    s2v(s, ad, nad, plain, plen, v);
    return memcmp(v, ct, 16) ? -1 : 0;  /* the tag is public: no need for a constant-time comparison here */
}

/* --- randomness: xoshiro256** seeded from getrandom (a fresh Unique Identifier and nonce a request) ----------- */

static uint64_t rs[4];

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rnd64(void) {
    uint64_t r = rotl(rs[1] * 5, 7) * 9, t = rs[1] << 17;
    rs[2] ^= rs[0]; rs[3] ^= rs[1]; rs[1] ^= rs[2]; rs[0] ^= rs[3]; rs[2] ^= t; rs[3] = rotl(rs[3], 45);
    return r;
}

static void rnd_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rnd64();
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* --- requests ----------------------------------------------------------------------------------------------- */

static siv_t c2s, s2c;
static uint8_t cookies[MAX_COOKIES][MAX_COOKIE_LEN];
static size_t cookie_lens[MAX_COOKIES];
static int ncookies;

static void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static unsigned get16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

/* Builds the request whose transmit timestamp is `xmt` with cookie `ci` into pkt; its Unique Identifier goes to
 * uid.  Returns its length. */
static size_t build_request(uint8_t *pkt, uint64_t xmt, int ci, uint8_t uid[UID_LEN]) {
    memset(pkt, 0, 48);
    pkt[0] = 0x23;  /* LI 0, VN 4, mode 3 */
    for (int i = 0; i < 8; i++) pkt[40 + i] = (uint8_t)(xmt >> (56 - 8 * i));
    size_t pos = 48;
    put16(pkt + pos, EF_UNIQUE_ID);
    put16(pkt + pos + 2, 4 + UID_LEN);
    rnd_bytes(uid, UID_LEN);
    memcpy(pkt + pos + 4, uid, UID_LEN);
    pos += 4 + UID_LEN;
    size_t clen = cookie_lens[ci], cpad = (clen + 3) & ~(size_t)3;
    put16(pkt + pos, EF_COOKIE);
    put16(pkt + pos + 2, (unsigned)(4 + cpad));
    memcpy(pkt + pos + 4, cookies[ci], clen);
    memset(pkt + pos + 4 + clen, 0, cpad - clen);
    pos += 4 + cpad;
    size_t auth = pos;
    put16(pkt + pos, EF_AUTHENTICATOR);
    put16(pkt + pos + 2, 4 + 4 + NONCE_LEN + 16);
    put16(pkt + pos + 4, NONCE_LEN);
    put16(pkt + pos + 6, 16);
    uint8_t *nonce = pkt + pos + 8;
    rnd_bytes(nonce, NONCE_LEN);
    part_t ad[2] = {{pkt, auth}, {nonce, NONCE_LEN}};
    siv_seal_empty(&c2s, ad, 2, pkt + pos + 8 + NONCE_LEN);
    return pos + 8 + NONCE_LEN + 16;
}

/* --- replies ------------------------------------------------------------------------------------------------ */

enum { V_OK, V_NAK, V_KOD, V_SHORT, V_MODE, V_ORIGIN, V_ZERO_TS, V_MALFORMED, V_NO_UID, V_BAD_UID, V_NO_AUTH,
       V_AUTH_FAIL, NV };
static const char *vnames[NV] = {"ok", "nak", "kod", "short", "mode", "origin", "zero_ts", "malformed", "no_uid",
                                 "bad_uid", "no_auth", "auth_fail"};

/* The verdict on a reply whose origin already matched its request (Unique Identifier uid); `verify`: decrypt and
 * check the authenticator and that its plaintext is extension fields holding at least one cookie. */
static int validate(const uint8_t *r, size_t n, const uint8_t uid[UID_LEN], int verify) {
    if (n < 48) return V_SHORT;
    if ((r[0] & 7) != 4) return V_MODE;
    if (r[1] == 0) return memcmp(r + 12, "NTSN", 4) == 0 ? V_NAK : V_KOD;
    if (!get64(r + 32) || !get64(r + 40)) return V_ZERO_TS;
    size_t pos = 48, auth = 0, auth_len = 0;
    int uid_seen = 0, uid_ok = 0;
    while (pos < n) {
        if (n - pos < 4) return V_MALFORMED;
        unsigned type = get16(r + pos), len = get16(r + pos + 2);
        if (len < 4 || len % 4 || pos + len > n) return V_MALFORMED;
        if (auth) return V_MALFORMED;  /* nothing may follow the authenticator */
        if (type == EF_UNIQUE_ID) {
            uid_seen = 1;
            uid_ok = len == 4 + UID_LEN && memcmp(r + pos + 4, uid, UID_LEN) == 0;
        } else if (type == EF_AUTHENTICATOR) {
            auth = pos;
            auth_len = len;
        }
        pos += len;
    }
    if (!uid_seen) return V_NO_UID;
    if (!uid_ok) return V_BAD_UID;
    if (!auth || auth_len < 8) return V_NO_AUTH;
    if (!verify) return V_OK;
    unsigned nonce_len = get16(r + auth + 4), ct_len = get16(r + auth + 6);
    size_t nonce_pad = (nonce_len + 3) & ~3u, ct_pad = (ct_len + 3) & ~3u;
    if (nonce_len < 16 || ct_len < 16 || 8 + nonce_pad + ct_pad > auth_len) return V_AUTH_FAIL;
    static uint8_t plain[MAX_PKT];
    part_t ad[2] = {{r, auth}, {r + auth + 8, nonce_len}};
    if (siv_open(&s2c, ad, 2, r + auth + 8 + nonce_pad, ct_len, plain)) return V_AUTH_FAIL;
    size_t plen = ct_len - 16, p = 0;
    int cookies_in = 0;
    while (p < plen) {  /* the encrypted fields: at least one new cookie */
        if (plen - p < 4) return V_AUTH_FAIL;
        unsigned type = get16(plain + p), len = get16(plain + p + 2);
        if (len < 4 || len % 4 || p + len > plen) return V_AUTH_FAIL;
        cookies_in += type == EF_COOKIE;
        p += len;
    }
    return cookies_in ? V_OK : V_AUTH_FAIL;
}

/* --- key file, hex ------------------------------------------------------------------------------------------ */

static int unhex(const char *h, uint8_t *out, size_t max, size_t *len) {
    size_t n = strlen(h);
    while (n && (h[n - 1] == '\n' || h[n - 1] == '\r' || h[n - 1] == ' ')) n--;
    if (n % 2 || n / 2 > max) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (uint8_t)v;
    }
    *len = n / 2;
    return 0;
}

static int read_keys(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); return -1; }
    static char line[4096];
    uint8_t key[64];
    size_t len;
    int have = 0;
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "c2s ", 4) && !unhex(line + 4, key, sizeof(key), &len) && len == 32) {
            if (siv_init(&c2s, key)) break;
            have |= 1;
        } else if (!strncmp(line, "s2c ", 4) && !unhex(line + 4, key, sizeof(key), &len) && len == 32) {
            if (siv_init(&s2c, key)) break;
            have |= 2;
        } else if (!strncmp(line, "cookie ", 7) && ncookies < MAX_COOKIES &&
                   !unhex(line + 7, cookies[ncookies], MAX_COOKIE_LEN, &cookie_lens[ncookies]) &&
                   cookie_lens[ncookies] >= 16) {
            ncookies++;
        }
    }
    fclose(f);
    if (have != 3 || !ncookies) {
        fprintf(stderr, "ntsload: %s needs c2s, s2c (32 bytes each) and at least one cookie\n", path);
        return -1;
    }
    return 0;
}

static void print_hex(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", p[i]);
}

/* -X: requests in hex, serials 1..n, cookies in turn */
static int emit_requests(int n) {
    static uint8_t pkt[MAX_PKT];
    uint8_t uid[UID_LEN];
    for (int i = 0; i < n; i++) {
        size_t len = build_request(pkt, (uint64_t)(i + 1), i % ncookies, uid);
        print_hex(pkt, len);
        printf("\n");
    }
    return 0;
}

/* -Y: "REQUEST_HEX REPLY_HEX" a line; the reply's origin is checked against the request's transmit timestamp */
static int judge_lines(void) {
    static char line[8192];
    static uint8_t req[MAX_PKT], rep[MAX_PKT];
    while (fgets(line, sizeof(line), stdin)) {
        char *sp = strchr(line, ' ');
        size_t qlen, plen;
        if (!sp) continue;
        *sp = 0;
        if (unhex(line, req, sizeof(req), &qlen) || unhex(sp + 1, rep, sizeof(rep), &plen) || qlen < 48 + 4 + UID_LEN) {
            printf("unparsed\n");
            continue;
        }
        if (plen >= 48 && (rep[0] & 7) == 4 && get64(rep + 24) != get64(req + 40)) printf("origin\n");
        else printf("%s\n", vnames[validate(rep, plen, req + 52, 1)]);
    }
    return 0;
}

/* --- the load ----------------------------------------------------------------------------------------------- */

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

typedef struct { uint64_t serial; int64_t sent_ns; uint8_t uid[UID_LEN]; int busy; } slot_t;

static slot_t slots[MAXW];
static uint64_t next_serial = 1;  /* a transmit timestamp is (serial << 10) | slot */

static size_t new_request(int s, uint8_t *pkt, int64_t now) {
    uint64_t serial = next_serial++;
    slots[s].serial = serial;
    slots[s].sent_ns = now;
    return build_request(pkt, serial << 10 | (uint64_t)s, (int)(serial % (uint64_t)ncookies), slots[s].uid);
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The verdict on a reply received at `at`, counted into v[]; the reply's slot when it answered the request in flight
 * there (which the caller then frees or replaces), -1 otherwise. */
/* the end of the JSON line: the invalid replies by reason, and the closing braces */
static void print_invalid_by(const uint64_t *v) {
    int first = 1;
    for (int i = V_SHORT; i < NV; i++) {
        if (!v[i]) continue;
        printf("%s\"%s\":%llu", first ? "" : ",", vnames[i], (unsigned long long)v[i]);
        first = 0;
    }
    printf("}}\n");
}

static int take_reply(const uint8_t *r, size_t len, int window, int64_t at, int paced_mode, uint64_t *v,
                      uint64_t *stale, uint64_t *valid, uint64_t *verified, uint64_t *unsync, uint64_t *judged,
                      int verify_every, int64_t *rtts, size_t *nrtt, size_t rtt_cap) {
    if (len < 48) { v[V_SHORT]++; return -1; }
    uint64_t origin = get64(r + 24);
    int s = (int)(origin & (MAXW - 1));  /* transmit timestamps carry their slot in the low bits */
    if ((r[0] & 7) != 4) { v[V_MODE]++; return -1; }
    if (s >= window || (origin >> 10) > slots[s].serial || origin >> 10 == 0) { v[V_ORIGIN]++; return -1; }
    /* a reply to a request given up as lost */
    if (origin >> 10 < slots[s].serial || (paced_mode && !slots[s].busy)) { (*stale)++; return -1; }
    int verify = (*judged)++ % (uint64_t)verify_every == 0;
    int verdict = validate(r, len, slots[s].uid, verify);
    v[verdict]++;
    if (verdict == V_OK) {
        (*valid)++;
        *verified += verify;
        if ((r[0] >> 6) == 3) (*unsync)++;
        if (*nrtt < rtt_cap) rtts[(*nrtt)++] = at - slots[s].sent_ns;
    }
    return s;
}

/* -r: a fixed offered load, `rate` requests per second in groups of `burst`, at most `window` in flight. */
static int paced(int fd, double rate, int burst, int window, double duration, int timeout_ms, int verify_every) {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  /* wake-ups within a microsecond of when a request is due */
    static int freelist[MAXW];
    int nfree = 0;
    for (int i = window - 1; i >= 0; i--) { slots[i].busy = 0; freelist[nfree++] = i; }
    size_t rtt_cap = 1 << 21, nrtt = 0;
    int64_t *rtts = malloc(rtt_cap * sizeof(int64_t));
    static uint8_t bufs[BATCH][MAX_PKT];
    static uint8_t out[MAXW][MAX_PKT];
    struct mmsghdr msgs[BATCH], outmsgs[MAXW];
    struct iovec iovs[BATCH], outiovs[MAXW];
    uint64_t offered = 0, late = 0, sent = 0, skipped = 0, valid = 0, lost = 0, stale = 0, unsync = 0, verified = 0;
    uint64_t judged = 0, v[NV] = {0};
    double cpu0 = cpu_s();
    int64_t start = mono_ns(), end = start + (int64_t)(duration * 1e9), timeout_ns = (int64_t)timeout_ms * 1000000;
    int64_t next_scan = start, drain_end = 0;
    for (;;) {
        int64_t now = mono_ns();
        if (now < end) {  /* the requests whose time has come: the first at the start, then one every 1/rate s */
            /* those due more than LATE_NS ago (past their burst's time) are not sent: after a stall of the generator
               itself they would go out all at once, a burst the server's receive buffer may not hold, which is not
               the load offered */
            int64_t late_ns = LATE_NS + (int64_t)((double)(burst - 1) * 1e9 / rate);  /* a burst waits for its last */
            uint64_t first_on_time = now - start > late_ns ? (uint64_t)((double)(now - start - late_ns) * rate / 1e9) : 0;
            if (first_on_time > offered + late) late = first_on_time - offered;
            uint64_t due = (uint64_t)((double)(now - start) * rate / 1e9) + 1 - offered - late;
            due -= due % (uint64_t)burst;
            int nout = 0;
            for (uint64_t k = 0; k < due && nout < MAXW; k++) {
                offered++;
                if (!nfree) { skipped++; continue; }
                int s = freelist[--nfree];
                slots[s].busy = 1;
                tx_ready(&outmsgs[nout], &outiovs[nout], out[nout], new_request(s, out[nout], now));
                nout++;
            }
            sent += send_all(fd, outmsgs, nout);  /* what is not sent times out and counts as lost */
        } else if (nfree == window) {
            break;  /* every request answered or given up */
        } else if (!drain_end) {
            drain_end = now + timeout_ns;
        } else if (now >= drain_end) {
            break;
        }
        for (;;) {  /* the replies that came meanwhile */
            rx_ready(msgs, iovs, &bufs[0][0], sizeof(bufs[0]), BATCH);
            int n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
            int64_t at = mono_ns();
            for (int i = 0; i < n; i++) {
                int s = take_reply(bufs[i], msgs[i].msg_len, window, at, 1, v, &stale, &valid, &verified, &unsync,
                                   &judged, verify_every, rtts, &nrtt, rtt_cap);
                if (s < 0) continue;
                slots[s].busy = 0;  /* answered (valid or not) */
                freelist[nfree++] = s;
            }
            if (n < BATCH) break;
        }
        now = mono_ns();
        if (now >= next_scan || drain_end) {  /* requests unanswered after the timeout are lost */
            for (int k = 0; k < window; k++) {
                if (slots[k].busy && now - slots[k].sent_ns > timeout_ns) {
                    lost++;
                    slots[k].busy = 0;
                    freelist[nfree++] = k;
                }
            }
            next_scan = now + 10000000;
        }
        sleep_until_due(now, start, end, offered + late, burst, rate);
    }
    double elapsed = (double)(end - start) / 1e9, cpu = cpu_s() - cpu0;
    qsort(rtts, nrtt, sizeof(int64_t), cmp64);
    double p50 = nrtt ? rtts[nrtt / 2] / 1e3 : 0, p99 = nrtt ? rtts[nrtt * 99 / 100] / 1e3 : 0;
    uint64_t invalid = 0;
    for (int i = V_SHORT; i < NV; i++) invalid += v[i];
    printf("{\"rate\":%.1f,\"burst\":%d,\"window\":%d,\"seconds\":%.3f,\"offered\":%llu,\"late\":%llu,\"sent\":%llu,\"skipped\":%llu,"
           "\"valid\":%llu,\"lost\":%llu,\"stale\":%llu,\"nak\":%llu,\"kod\":%llu,\"invalid\":%llu,\"auth_fail\":%llu,"
           "\"verified\":%llu,\"unsync\":%llu,\"replies_per_s\":%.1f,\"loss_pct\":%.4f,\"rtt_us_p50\":%.1f,"
           "\"rtt_us_p99\":%.1f,\"load_cpu_pct\":%.1f,\"invalid_by\":{",
           rate, burst, window, elapsed, (unsigned long long)offered, (unsigned long long)late, (unsigned long long)sent,
           (unsigned long long)skipped, (unsigned long long)valid, (unsigned long long)lost, (unsigned long long)stale,
           (unsigned long long)v[V_NAK], (unsigned long long)v[V_KOD], (unsigned long long)invalid,
           (unsigned long long)v[V_AUTH_FAIL], (unsigned long long)verified, (unsigned long long)unsync,
           valid / elapsed, offered ? 100.0 * (double)(offered - valid) / (double)offered : 0.0, p50, p99,
           100.0 * cpu / ((double)(mono_ns() - start) / 1e9));
    print_invalid_by(v);
    return 0;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1", *keyfile = NULL;
    int port = 123, window = 32, timeout_ms = 200, verify_every = 8, emit = 0, judge = 0, burst = 1, window_set = 0;
    double duration = 5.0, rate = 0;
    int opt;
    while ((opt = getopt(argc, argv, "h:p:d:w:t:k:a:X:Yr:B:")) != -1) {
        switch (opt) {
            case 'h': host = optarg; break;
            case 'p': port = atoi(optarg); break;
            case 'd': duration = atof(optarg); break;
            case 'w': window = atoi(optarg); window_set = 1; break;
            case 'r': rate = atof(optarg); break;
            case 'B': burst = atoi(optarg); break;
            case 't': timeout_ms = atoi(optarg); break;
            case 'k': keyfile = optarg; break;
            case 'a': verify_every = atoi(optarg); break;
            case 'X': emit = atoi(optarg); break;
            case 'Y': judge = 1; break;
            default:
                fprintf(stderr, "usage: %s -k KEYFILE [-h HOST -p PORT -d SECONDS -w WINDOW -t TIMEOUT_MS -a VERIFY_EVERY]"
                        " | -k KEYFILE -r RATE [-B BURST -w MAX_IN_FLIGHT -h -p -d -t -a] | -k KEYFILE -X N | -k KEYFILE -Y\n", argv[0]);
                return 2;
        }
    }
    if (!keyfile || read_keys(keyfile)) return 2;
    if (getrandom(rs, sizeof(rs), 0) != sizeof(rs)) { perror("ntsload: getrandom"); return 1; }
    if (emit) return emit_requests(emit);
    if (judge) return judge_lines();
    if (rate > 0 && !window_set) window = MAXW;
    if (window < 1 || window > MAXW) { fprintf(stderr, "window must be 1..%d\n", MAXW); return 2; }
    if (rate < 0 || burst < 1 || burst > MAXW) { fprintf(stderr, "rate must be > 0, burst 1..%d\n", MAXW); return 2; }
    if (verify_every < 1) verify_every = 1;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        perror("ntsload: socket");
        return 1;
    }
    int buf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    if (rate > 0) return paced(fd, rate, burst, window, duration, timeout_ms, verify_every);
    size_t rtt_cap = 1 << 21, nrtt = 0;
    int64_t *rtts = malloc(rtt_cap * sizeof(int64_t));
    uint64_t sent = 0, valid = 0, lost = 0, stale = 0, unsync = 0, verified = 0, v[NV] = {0};
    static uint8_t pkt[MAX_PKT];
    double cpu0 = cpu_s();
    int64_t start = mono_ns(), end = start + (int64_t)(duration * 1e9), timeout_ns = (int64_t)timeout_ms * 1000000;
    for (int i = 0; i < window; i++) {
        size_t len = new_request(i, pkt, mono_ns());
        if (send(fd, pkt, len, 0) == (ssize_t)len) sent++;
    }
    static uint8_t bufs[BATCH][MAX_PKT];
    static uint8_t out[MAXW][MAX_PKT];
    static size_t outlen[MAXW];
    struct mmsghdr msgs[BATCH], outmsgs[MAXW];
    struct iovec iovs[BATCH], outiovs[MAXW];
    int nout = 0, full = 0;
    uint64_t judged = 0;
    while (mono_ns() < end) {
        if (!full) {  /* a full batch means more may be waiting: read again before sleeping */
            struct pollfd p = {fd, POLLIN, 0};
            poll(&p, 1, 10);
        }
        rx_ready(msgs, iovs, &bufs[0][0], sizeof(bufs[0]), BATCH);
        int n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
        full = n == BATCH;
        int64_t now = mono_ns();
        for (int i = 0; i < n; i++) {
            int s = take_reply(bufs[i], msgs[i].msg_len, window, now, 0, v, &stale, &valid, &verified, &unsync,
                               &judged, verify_every, rtts, &nrtt, rtt_cap);
            if (s < 0) continue;
            /* answered (valid or not): its replacement goes out with the batch's others */
            outlen[nout] = new_request(s, out[nout], now);
            nout++;
        }
        if (nout) {  /* one system call for the batch's replacements */
            for (int i = 0; i < nout; i++) {
                outiovs[i].iov_base = out[i];
                outiovs[i].iov_len = outlen[i];
                memset(&outmsgs[i], 0, sizeof(outmsgs[i]));
                outmsgs[i].msg_hdr.msg_iov = &outiovs[i];
                outmsgs[i].msg_hdr.msg_iovlen = 1;
            }
            int m = sendmmsg(fd, outmsgs, (unsigned)nout, 0);
            if (m > 0) sent += (uint64_t)m;
            nout = 0;
        }
        for (int k = 0; k < window; k++) {
            if (now - slots[k].sent_ns > timeout_ns) {
                lost++;
                size_t len = new_request(k, pkt, mono_ns());
                if (send(fd, pkt, len, 0) == (ssize_t)len) sent++;
            }
        }
    }
    double elapsed = (mono_ns() - start) / 1e9, cpu = cpu_s() - cpu0;
    qsort(rtts, nrtt, sizeof(int64_t), cmp64);
    double p50 = nrtt ? rtts[nrtt / 2] / 1e3 : 0, p99 = nrtt ? rtts[nrtt * 99 / 100] / 1e3 : 0;
    uint64_t invalid = 0;
    for (int i = V_SHORT; i < NV; i++) invalid += v[i];
    /* requests still in flight at the end are neither answered nor lost */
    uint64_t answered = valid + v[V_NAK] + v[V_KOD] + invalid;
    printf("{\"window\":%d,\"seconds\":%.3f,\"sent\":%llu,\"valid\":%llu,\"lost\":%llu,\"stale\":%llu,\"nak\":%llu,"
           "\"kod\":%llu,\"invalid\":%llu,\"auth_fail\":%llu,\"verified\":%llu,\"unsync\":%llu,\"replies_per_s\":%.1f,"
           "\"loss_pct\":%.4f,\"rtt_us_p50\":%.1f,\"rtt_us_p99\":%.1f,\"load_cpu_pct\":%.1f,\"invalid_by\":{",
           window, elapsed, (unsigned long long)sent, (unsigned long long)valid, (unsigned long long)lost,
           (unsigned long long)stale, (unsigned long long)v[V_NAK], (unsigned long long)v[V_KOD],
           (unsigned long long)invalid, (unsigned long long)v[V_AUTH_FAIL], (unsigned long long)verified,
           (unsigned long long)unsync, valid / elapsed, answered + lost ? 100.0 * lost / (answered + lost) : 0.0, p50, p99,
           100.0 * cpu / elapsed);
    print_invalid_by(v);
    return 0;
}
