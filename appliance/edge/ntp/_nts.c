/*
 * _nts.c: NTS (RFC 8915 §5.7) for the NTP fast path: open a request's cookie and check its authenticator, answer
 * with fresh cookies, or say why not.  Byte for byte appliance/protocol/ntp/nts.py, whose docstrings specify it:
 *
 * - a cookie is key id (4) || nonce (16) || AES-SIV(master key, AD: key id, nonce; AEAD id (2) || 0 (2) || C2S ||
 *   S2C), 104 bytes (CookieJar.seal / open), sealed under the newest master key, opened under any held;
 * - open_request's checks in its order of outcomes: malformed (dropped), a cookie that does not open or an
 *   authenticator that does not verify (NAK), else the keys; then server.py's table of recent authenticated Unique
 *   Identifiers, bounded to the last `replay_table` of them (a UID seen again is dropped);
 * - seal_reply: the UID echoed, an Authenticator over header and UID whose ciphertext holds one new cookie per
 *   cookie and placeholder, as many as keep the reply within the request's length.
 *
 * AES-SIV (RFC 5297) is built here from libcrypto's AES-CBC (CMAC, RFC 4493) and AES-ECB (CTR), as bench/ntsload.c
 * does: OpenSSL 3.0's own "AES-128-SIV" computes no tag for an empty plaintext, which every client request's
 * authenticator is.  Setting a key or an IV costs more than encrypting a few blocks in OpenSSL 3.0 (parameter
 * look-ups by name), so an IV is set only with a key: each key's CBC context keeps chaining between calls and a
 * CMAC XORs its first block with the last output instead (one library call per CMAC), and CTR's counter blocks
 * are encrypted by ECB in one call.  Random bytes (nonces) come from getrandom(), a pool at a time.
 */
#define _GNU_SOURCE
#include "_nts.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define HEADER_LEN 48
#define EF_UNIQUE_ID 0x0104
#define EF_COOKIE 0x0204
#define EF_COOKIE_PLACEHOLDER 0x0304
#define EF_AUTHENTICATOR 0x0404
#define MIN_UID_LEN 32
#define MAX_PLACEHOLDERS 7
#define AEAD_AES_SIV_CMAC_256 15
#define KEY_LEN 32
#define NONCE_LEN 16
#define TAG_LEN 16
#define COOKIE_PLAIN_LEN (4 + 2 * KEY_LEN)
#define COOKIE_LEN (4 + NONCE_LEN + TAG_LEN + COOKIE_PLAIN_LEN)  /* 104 */
#define COOKIE_FIELD_LEN (4 + COOKIE_LEN)
#define AUTH_FIXED (4 + 4 + NONCE_LEN + TAG_LEN)  /* the Authenticator's field header, lengths, nonce, tag */
#define MAX_MSG 1100  /* larger than any request the fast path passes on (1024) */
#define POOL_SIZE 4096
#define RANDOM_PER_REPLY (NONCE_LEN + (1 + MAX_PLACEHOLDERS) * NONCE_LEN)

typedef struct { const uint8_t *p; size_t len; } part;

typedef struct {
    EVP_CIPHER_CTX *cbc, *ecb;              /* K1: CMAC; K2: CTR's key stream */
    const EVP_CIPHER *cbc_kind, *ecb_kind;  /* what each context is set up for (NULL: nothing yet) */
    int ecb_keyed;
    size_t half;                            /* bytes of each key half: 16, 24 or 32 */
    uint8_t ctr_key[32];
    uint8_t sub1[16], sub2[16], d0[16];     /* CMAC subkeys; CMAC(0^128), S2V's first value */
    uint8_t chain[16];                      /* the CBC context's chaining value */
} siv_key;

/* The table of recent Unique Identifiers is a ring of `cap` entries, newest overwriting oldest, chained from hash
   buckets newest first.  A link names a slot and the insertion number the entry there had: once the slot is
   reused the link is stale, and so is the rest of the chain (older still), so nothing is ever unlinked. */
typedef struct { uint32_t slot, seq; } uid_link;
typedef struct { uint8_t digest[32]; uint32_t seq; uint16_t len; uid_link next; } uid_entry;

typedef struct { size_t auth_at, plain_len; uint8_t nonce_mac[16]; } seal_job;

struct nts_state {
    int nkeys;
    uint32_t ids[NTS_MAX_KEYS];
    siv_key master[NTS_MAX_KEYS];
    siv_key c2s, uid_key;
    siv_key s2c[NTS_SLOTS];
    seal_job jobs[NTS_SLOTS];
    uint8_t sip[16];
    uid_entry *uids;
    uid_link *buckets;
    uint32_t cap, nbuckets, next_slot, next_seq;
    size_t pool_left;
    uint8_t pool[POOL_SIZE];
    uint8_t scratch[MAX_MSG + 32], plain[MAX_MSG + 32];
};

static const EVP_CIPHER *cbc_ciphers[3], *ecb_ciphers[3];  /* AES-128, AES-192, AES-256 */

static unsigned get16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put16(uint8_t *p, size_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, v >> 16); put16(p + 2, v & 0xffff); }
static size_t pad4(size_t n) { return (n + 3) & ~(size_t)3; }

/* ----------------------------------------------------------------------------------- AES-SIV, RFC 5297 */

static uint64_t be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

static void put_be64(uint8_t *p, uint64_t v) {
    v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
}

/* Doubling in GF(2^128) (RFC 5297 §2.3), without a branch on the secret bit. */
static void dbl(uint8_t b[16]) {
    uint64_t hi = be64(b), lo = be64(b + 8);
    put_be64(b, hi << 1 | lo >> 63);
    put_be64(b + 8, lo << 1 ^ ((0 - (hi >> 63)) & 0x87));
}

/* out = a ^ b, n bytes (out may be a or b). */
static void xor_bytes(uint8_t *out, const uint8_t *a, const uint8_t *b, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        x ^= y;
        memcpy(out + i, &x, 8);
    }
    for (; i < n; i++) out[i] = a[i] ^ b[i];
}

static void xor16(uint8_t *a, const uint8_t *b) { xor_bytes(a, a, b, 16); }

/* Zero-IV CBC-MAC of `len` (whole blocks) bytes of buf, which it overwrites.  The context chains on from its last
   call: XORing the first block with that output makes this a fresh zero-IV CBC. */
static int cbc_mac(siv_key *s, uint8_t *buf, size_t len, uint8_t out[16]) {
    static const uint8_t zero[16];
    int outl = 0;
    xor16(buf, s->chain);
    if (!EVP_EncryptUpdate(s->cbc, buf, &outl, buf, (int)len) || (size_t)outl != len) {
        memset(s->chain, 0, 16);  /* back to a known chaining value */
        if (!EVP_EncryptInit_ex2(s->cbc, NULL, NULL, zero, NULL)) s->cbc_kind = NULL;
        return -1;
    }
    memcpy(out, buf + len - 16, 16);
    memcpy(s->chain, out, 16);
    return 0;
}

/* CMAC (RFC 4493) of msg, len <= MAX_MSG; buf: MAX_MSG + 32 bytes of scratch (msg may be buf itself). */
static int cmac(siv_key *s, const uint8_t *msg, size_t len, uint8_t out[16], uint8_t *buf) {
    if (len > MAX_MSG) return -1;
    size_t n = len ? (len + 15) / 16 : 1;
    if (msg != buf) memcpy(buf, msg, len);
    if (len && len % 16 == 0) {
        xor16(buf + len - 16, s->sub1);
    } else {
        memset(buf + len, 0, n * 16 - len);
        buf[len] = 0x80;
        xor16(buf + (n - 1) * 16, s->sub2);
    }
    return cbc_mac(s, buf, n * 16, out);
}

static int cipher_index(size_t half) { return half == 16 ? 0 : half == 24 ? 1 : half == 32 ? 2 : -1; }

/* K1 (the first half) for S2V, K2 (the second) for CTR, set up when first used. */
static int siv_set_key(siv_key *s, const uint8_t *key, size_t keylen) {
    static const uint8_t zero[16];
    int k = keylen % 2 ? -1 : cipher_index(keylen / 2);
    if (k < 0) return -1;
    const EVP_CIPHER *cbc = cbc_ciphers[k];
    if (!EVP_EncryptInit_ex2(s->cbc, cbc == s->cbc_kind ? NULL : cbc, key, zero, NULL)) {
        s->cbc_kind = NULL;
        return -1;
    }
    if (cbc != s->cbc_kind) {
        EVP_CIPHER_CTX_set_padding(s->cbc, 0);
        s->cbc_kind = cbc;
    }
    memset(s->chain, 0, 16);
    s->half = keylen / 2;
    memcpy(s->ctr_key, key + s->half, s->half);
    s->ecb_keyed = 0;
    uint8_t block[16] = {0};
    if (cbc_mac(s, block, 16, block)) return -1;  /* L = AES(K1, 0) */
    memcpy(s->sub1, block, 16);
    dbl(s->sub1);
    memcpy(s->sub2, s->sub1, 16);
    dbl(s->sub2);
    memcpy(block, s->sub1, 16);  /* CMAC(0^128): one complete block */
    return cbc_mac(s, block, 16, s->d0);
}

/* AES-CTR under K2 from the synthetic IV v (bits 63 and 31 cleared), len <= MAX_MSG, in place allowed; the key
   stream is the counter blocks encrypted by ECB in `scratch` (MAX_MSG + 32 bytes). */
static int siv_ctr(siv_key *s, const uint8_t v[16], const uint8_t *in, uint8_t *out, size_t len, uint8_t *scratch) {
    if (!len) return 0;
    if (len > MAX_MSG) return -1;
    if (!s->ecb_keyed) {
        const EVP_CIPHER *ecb = ecb_ciphers[cipher_index(s->half)];
        if (!EVP_EncryptInit_ex2(s->ecb, ecb == s->ecb_kind ? NULL : ecb, s->ctr_key, NULL, NULL)) {
            s->ecb_kind = NULL;
            return -1;
        }
        if (ecb != s->ecb_kind) {
            EVP_CIPHER_CTX_set_padding(s->ecb, 0);
            s->ecb_kind = ecb;
        }
        s->ecb_keyed = 1;
    }
    uint8_t q[16];
    memcpy(q, v, 16);
    q[8] &= 0x7f;
    q[12] &= 0x7f;
    /* The counter is Q + i modulo 2^128; with bit 31 cleared its last 32 bits cannot carry over in fewer than 2^31
       blocks (why RFC 5297 §2.5 clears it). */
    uint32_t low = get32(q + 12);
    size_t blocks = (len + 15) / 16;
    for (size_t i = 0; i < blocks; i++) {
        memcpy(scratch + 16 * i, q, 12);
        put32(scratch + 16 * i + 12, low + (uint32_t)i);
    }
    int outl = 0;
    if (!EVP_EncryptUpdate(s->ecb, scratch, &outl, scratch, (int)(16 * blocks)) || (size_t)outl != 16 * blocks)
        return -1;
    xor_bytes(out, in, scratch, len);
    return 0;
}

/* S2V: d starts as d0; each associated-data component is added, then the plaintext finishes it. */
static int s2v_add(siv_key *s, uint8_t d[16], const uint8_t *p, size_t len, uint8_t *scratch) {
    uint8_t m[16];
    if (cmac(s, p, len, m, scratch)) return -1;
    dbl(d);
    xor16(d, m);
    return 0;
}

static int s2v_finish(siv_key *s, uint8_t d[16], const uint8_t *plain, size_t plen, uint8_t v[16], uint8_t *scratch) {
    if (plen > MAX_MSG) return -1;
    if (plen >= 16) {  /* T = plaintext xorend D */
        memcpy(scratch, plain, plen);
        xor16(scratch + plen - 16, d);
        return cmac(s, scratch, plen, v, scratch);
    }
    dbl(d);  /* T = dbl(D) xor pad(plaintext) */
    memset(scratch, 0, 16);
    if (plen) memcpy(scratch, plain, plen);
    scratch[plen] = 0x80;
    xor16(scratch, d);
    return cmac(s, scratch, 16, v, scratch);
}

/* Decrypt ct (tag || ciphertext) into plain; 0 when the tag verifies. */
static int siv_open(siv_key *s, const part *ad, int nad, const uint8_t *ct, size_t ctlen, uint8_t *plain,
                    uint8_t *scratch) {
    if (ctlen < TAG_LEN || ctlen - TAG_LEN > MAX_MSG) return -1;
    size_t plen = ctlen - TAG_LEN;
    uint8_t d[16], v[16];
    if (siv_ctr(s, ct, ct + TAG_LEN, plain, plen, scratch)) return -1;
    memcpy(d, s->d0, 16);
    for (int i = 0; i < nad; i++)
        if (s2v_add(s, d, ad[i].p, ad[i].len, scratch)) return -1;
    if (s2v_finish(s, d, plain, plen, v, scratch)) return -1;
    return CRYPTO_memcmp(v, ct, TAG_LEN) ? -1 : 0;
}

static int siv_key_new(siv_key *s) {
    s->cbc = EVP_CIPHER_CTX_new();
    s->ecb = EVP_CIPHER_CTX_new();
    return s->cbc && s->ecb ? 0 : -1;
}

static void siv_key_free(siv_key *s) {
    EVP_CIPHER_CTX_free(s->cbc);
    EVP_CIPHER_CTX_free(s->ecb);
    OPENSSL_cleanse(s, sizeof(*s));
}

/* --------------------------------------------------------------------------------------- random bytes */

static int refill(nts_state *st) {
    size_t have = 0;
    while (have < POOL_SIZE) {
        ssize_t n = getrandom(st->pool + have, POOL_SIZE - have, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        have += (size_t)n;
    }
    st->pool_left = POOL_SIZE;
    return 0;
}

static int take_random(nts_state *st, uint8_t *out, size_t n) {
    if (st->pool_left < n && refill(st)) return -1;
    uint8_t *from = st->pool + POOL_SIZE - st->pool_left;
    memcpy(out, from, n);
    OPENSSL_cleanse(from, n);
    st->pool_left -= n;
    return 0;
}

/* ------------------------------------------------------------------------- recent Unique Identifiers */

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND do { v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); v2 += v3; v3 = ROTL(v3, 16); \
                      v3 ^= v2; v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; \
                      v2 = ROTL(v2, 32); } while (0)

/* SipHash-2-4 under a random key: the identifiers are the client's choice, their buckets must not be. */
static uint64_t siphash(const uint8_t key[16], const uint8_t *in, size_t len) {
    uint64_t k0 = le64(key), k1 = le64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = le64(in + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < len % 8; i++) b |= (uint64_t)in[whole + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* What is kept of an identifier: itself when it has the usual 32 bytes, else a CMAC of it under a random key
   (a collision then has a chance of 2^-128). */
static int uid_digest(nts_state *st, const uint8_t *uid, size_t len, uint8_t out[32]) {
    if (len == 32) {
        memcpy(out, uid, 32);
        return 0;
    }
    memset(out, 0, 32);
    return cmac(&st->uid_key, uid, len, out, st->scratch);
}

static uint32_t uid_hash(const nts_state *st, const uint8_t *uid, size_t len) {
    return (uint32_t)siphash(st->sip, uid, len);
}

/* GCC (12) takes a function made of prefetches alone for one without effect and drops its calls, the prefetches
   with them, inlined or not: the prefetching helpers are kept out of its interprocedural analysis. */
#if defined(__GNUC__) && !defined(__clang__)
#define KEEP_PREFETCH __attribute__((noipa))
#else
#define KEEP_PREFETCH __attribute__((noinline))
#endif

/* The lines seen_before will read, asked for while the request's cryptography runs: the bucket and the slot the
   identifier will take, then (prefetch_chain, once the bucket is in) the entry the bucket names.  The table is
   megabytes read at random: without them each request waited on two dependent misses. */
KEEP_PREFETCH static void prefetch_uid(const nts_state *st, uint32_t hash) {
    if (!st->cap) return;
    __builtin_prefetch(&st->buckets[hash & (st->nbuckets - 1)], 1);
    __builtin_prefetch(&st->uids[st->next_slot], 1);
}

KEEP_PREFETCH static void prefetch_chain(const nts_state *st, uint32_t hash) {
    if (!st->cap) return;
    uid_link link = st->buckets[hash & (st->nbuckets - 1)];
    if (link.seq) __builtin_prefetch(&st->uids[link.slot]);
}

static int live(const nts_state *st, uid_link link) { return link.seq && st->uids[link.slot].seq == link.seq; }

/* server.py's _uids: 1 if this identifier is among the last `cap` remembered, else remember it (0). */
static int seen_before(nts_state *st, const uint8_t *uid, size_t len, uint32_t hash) {
    if (!st->cap) return 0;  /* a table of none remembers nothing */
    uint8_t digest[32];
    if (uid_digest(st, uid, len, digest)) return 0;
    uid_link *bucket = &st->buckets[hash & (st->nbuckets - 1)];
    uid_link link = *bucket;
    for (uint32_t steps = 0; live(st, link) && steps < st->cap; steps++) {
        const uid_entry *e = &st->uids[link.slot];
        if (e->len == len && memcmp(e->digest, digest, 32) == 0) return 1;
        link = e->next;
    }
    uid_entry *e = &st->uids[st->next_slot];  /* the oldest goes */
    memcpy(e->digest, digest, 32);
    e->len = (uint16_t)len;
    e->seq = st->next_seq;
    e->next = *bucket;
    bucket->slot = st->next_slot;
    bucket->seq = st->next_seq;
    st->next_slot = (st->next_slot + 1) % st->cap;
    st->next_seq = st->next_seq == UINT32_MAX ? 1 : st->next_seq + 1;  /* 0: no entry */
    return 0;
}

/* -------------------------------------------------------------------------------------------- state */

nts_state *nts_new(uint32_t replay_table) {
    static const char *cbc_names[3] = {"AES-128-CBC", "AES-192-CBC", "AES-256-CBC"};
    static const char *ecb_names[3] = {"AES-128-ECB", "AES-192-ECB", "AES-256-ECB"};
    for (int i = 0; i < 3; i++) {
        if (!cbc_ciphers[i]) cbc_ciphers[i] = EVP_CIPHER_fetch(NULL, cbc_names[i], NULL);
        if (!ecb_ciphers[i]) ecb_ciphers[i] = EVP_CIPHER_fetch(NULL, ecb_names[i], NULL);
        if (!cbc_ciphers[i] || !ecb_ciphers[i]) return NULL;
    }
    nts_state *st = calloc(1, sizeof(*st));
    if (!st) return NULL;
    int ok = siv_key_new(&st->c2s) == 0 && siv_key_new(&st->uid_key) == 0;
    for (int i = 0; i < NTS_MAX_KEYS; i++) ok = ok && siv_key_new(&st->master[i]) == 0;
    for (int i = 0; i < NTS_SLOTS; i++) ok = ok && siv_key_new(&st->s2c[i]) == 0;
    st->cap = replay_table;
    st->nbuckets = 1;
    while (st->nbuckets < 2 * (uint64_t)replay_table && st->nbuckets < (1u << 30)) st->nbuckets <<= 1;
    st->next_seq = 1;
    st->uids = calloc(replay_table ? replay_table : 1, sizeof(uid_entry));
    st->buckets = calloc(st->nbuckets, sizeof(uid_link));
    uint8_t key[32];
    ok = ok && st->uids && st->buckets && refill(st) == 0 && take_random(st, key, 32) == 0 &&
         take_random(st, st->sip, 16) == 0 && siv_set_key(&st->uid_key, key, 32) == 0;
    OPENSSL_cleanse(key, sizeof(key));
    if (!ok) {
        nts_free(st);
        return NULL;
    }
    return st;
}

void nts_free(nts_state *st) {
    if (!st) return;
    siv_key_free(&st->c2s);
    siv_key_free(&st->uid_key);
    for (int i = 0; i < NTS_MAX_KEYS; i++) siv_key_free(&st->master[i]);
    for (int i = 0; i < NTS_SLOTS; i++) siv_key_free(&st->s2c[i]);
    free(st->uids);
    free(st->buckets);
    OPENSSL_cleanse(st, sizeof(*st));
    free(st);
}

int nts_set_keys(nts_state *st, int n, const uint32_t *ids, const uint8_t *keys, size_t keylen) {
    st->nkeys = 0;
    if (n < 0 || n > NTS_MAX_KEYS) return -1;
    for (int i = 0; i < n; i++) {
        if (siv_set_key(&st->master[i], keys + (size_t)i * keylen, keylen)) return -1;
        st->ids[i] = ids[i];
    }
    st->nkeys = n;
    return 0;
}

int nts_key_count(const nts_state *st) { return st->nkeys; }

/* -------------------------------------------------------------------------------------------- cookies */

/* CookieJar.open; the keys go to rq.  A key id held twice: the newer key, as the jar's dict keeps it. */
static int open_cookie(nts_state *st, const uint8_t *cookie, size_t len, nts_request *rq) {
    if (len != COOKIE_LEN) return -1;
    uint32_t id = get32(cookie);
    int k = st->nkeys - 1;
    while (k >= 0 && st->ids[k] != id) k--;
    if (k < 0) return -1;
    part ad[2] = {{cookie, 4}, {cookie + 4, NONCE_LEN}};
    uint8_t plain[COOKIE_PLAIN_LEN];
    int bad = siv_open(&st->master[k], ad, 2, cookie + 4 + NONCE_LEN, TAG_LEN + COOKIE_PLAIN_LEN, plain,
                       st->scratch) || get16(plain) != AEAD_AES_SIV_CMAC_256;
    if (!bad) {
        memcpy(rq->c2s, plain + 4, KEY_LEN);
        memcpy(rq->s2c, plain + 4 + KEY_LEN, KEY_LEN);
    }
    OPENSSL_cleanse(plain, sizeof(plain));
    return bad ? -1 : 0;
}

/* CookieJar.seal under the newest key, COOKIE_LEN bytes at out. */
static int seal_cookie(nts_state *st, const nts_request *rq, uint8_t *out) {
    siv_key *k = &st->master[st->nkeys - 1];
    uint8_t *nonce = out + 4, *tag = out + 4 + NONCE_LEN, *plain = tag + TAG_LEN, d[16];
    put32(out, st->ids[st->nkeys - 1]);
    if (take_random(st, nonce, NONCE_LEN)) return -1;
    put16(plain, AEAD_AES_SIV_CMAC_256);
    put16(plain + 2, 0);
    memcpy(plain + 4, rq->c2s, KEY_LEN);
    memcpy(plain + 4 + KEY_LEN, rq->s2c, KEY_LEN);
    memcpy(d, k->d0, 16);
    if (s2v_add(k, d, out, 4, st->scratch) || s2v_add(k, d, nonce, NONCE_LEN, st->scratch) ||
        s2v_finish(k, d, plain, COOKIE_PLAIN_LEN, tag, st->scratch))
        return -1;
    return siv_ctr(k, tag, plain, plain, COOKIE_PLAIN_LEN, st->scratch);
}

/* ------------------------------------------------------------------------------------ NTP requests */

/* nts.extension_fields from `pos`: the fields tile the rest (at least 4 bytes each, multiples of 4)? */
static int tiles(const uint8_t *d, size_t pos, size_t len) {
    while (pos < len) {
        if (len - pos < 4) return 0;
        size_t field = get16(d + pos + 2);
        if (field < 4 || field % 4 || pos + field > len) return 0;
        pos += field;
    }
    return 1;
}

int nts_is_nts(const uint8_t *d, size_t len) {
    if (!tiles(d, HEADER_LEN, len)) return 0;
    for (size_t pos = HEADER_LEN; pos < len; pos += get16(d + pos + 2))
        if (get16(d + pos) == EF_UNIQUE_ID) return 1;
    return 0;
}

int nts_open(nts_state *st, const uint8_t *d, size_t len, nts_request *rq) {
    const uint8_t *uid = NULL, *cookie = NULL;
    size_t uid_len = 0, cookie_len = 0, auth = 0;
    int placeholders = 0;
    if (!tiles(d, HEADER_LEN, len)) return NTS_DROP_MALFORMED;
    for (size_t pos = HEADER_LEN; pos < len;) {
        unsigned kind = get16(d + pos);
        size_t field = get16(d + pos + 2);
        if (kind == EF_UNIQUE_ID) {
            if (uid || field - 4 < MIN_UID_LEN) return NTS_DROP_MALFORMED;
            uid = d + pos + 4;
            uid_len = field - 4;
        } else if (kind == EF_COOKIE) {
            if (cookie) return NTS_DROP_MALFORMED;
            cookie = d + pos + 4;
            cookie_len = field - 4;
        } else if (kind == EF_COOKIE_PLACEHOLDER) {
            placeholders++;
        } else if (kind == EF_AUTHENTICATOR) {
            if (pos + field != len) return NTS_DROP_MALFORMED;  /* nothing unauthenticated may follow it (§5.6) */
            auth = pos;
        }
        pos += field;
    }
    if (!uid || !cookie || !auth || placeholders > MAX_PLACEHOLDERS) return NTS_DROP_MALFORMED;
    uint32_t hash = uid_hash(st, uid, uid_len);
    prefetch_uid(st, hash);
    const uint8_t *body = d + auth + 4;  /* nts._authenticator */
    size_t body_len = get16(d + auth + 2) - 4;
    if (body_len < 4) return NTS_DROP_MALFORMED;
    size_t nonce_len = get16(body), ct_len = get16(body + 2), nonce_end = 4 + pad4(nonce_len);
    if (nonce_len < 16 || ct_len < 16 || nonce_end + pad4(ct_len) > body_len) return NTS_DROP_MALFORMED;
    rq->uid = uid;
    rq->uid_len = uid_len;
    rq->cookies_wanted = 1 + placeholders;
    rq->request_len = len;
    if (open_cookie(st, cookie, cookie_len, rq)) return NTS_NAK;  /* nts-bad-cookie */
    prefetch_chain(st, hash);
    part ad[2] = {{d, auth}, {body + 4, nonce_len}};
    if (siv_set_key(&st->c2s, rq->c2s, KEY_LEN) ||
        siv_open(&st->c2s, ad, 2, body + nonce_end, ct_len, st->plain, st->scratch) ||
        !tiles(st->plain, 0, ct_len - TAG_LEN))
        return NTS_NAK;  /* nts-bad-authenticator */
    if (st->pool_left < RANDOM_PER_REPLY && refill(st)) return NTS_UNDECIDED;
    return seen_before(st, uid, uid_len, hash) ? NTS_DROP_REPLAY : NTS_OK;
}

size_t nts_nak_fields(const nts_request *rq, uint8_t *out) {
    put16(out, EF_UNIQUE_ID);
    put16(out + 2, 4 + rq->uid_len);
    memcpy(out + 4, rq->uid, rq->uid_len);
    return 4 + rq->uid_len;
}

size_t nts_prepare_reply(nts_state *st, int slot, const nts_request *rq, uint8_t *reply) {
    seal_job *job = &st->jobs[slot];
    size_t uid_field = 4 + rq->uid_len, fixed = HEADER_LEN + uid_field + AUTH_FIXED;
    size_t count = rq->request_len > fixed ? (rq->request_len - fixed) / COOKIE_FIELD_LEN : 0;
    if (count > (size_t)rq->cookies_wanted) count = (size_t)rq->cookies_wanted;
    if (!st->nkeys) return 0;
    job->auth_at = HEADER_LEN + nts_nak_fields(rq, reply + HEADER_LEN);
    job->plain_len = count * COOKIE_FIELD_LEN;
    uint8_t *a = reply + job->auth_at, *nonce = a + 8, *plain = a + AUTH_FIXED;
    put16(a, EF_AUTHENTICATOR);
    put16(a + 2, AUTH_FIXED + job->plain_len);
    put16(a + 4, NONCE_LEN);
    put16(a + 6, TAG_LEN + job->plain_len);
    if (take_random(st, nonce, NONCE_LEN)) return 0;
    for (size_t i = 0; i < count; i++) {
        uint8_t *field = plain + i * COOKIE_FIELD_LEN;
        put16(field, EF_COOKIE);
        put16(field + 2, COOKIE_FIELD_LEN);
        if (seal_cookie(st, rq, field + 4)) return 0;
    }
    siv_key *k = &st->s2c[slot];
    if (siv_set_key(k, rq->s2c, KEY_LEN) || cmac(k, nonce, NONCE_LEN, job->nonce_mac, st->scratch)) return 0;
    return job->auth_at + AUTH_FIXED + job->plain_len;
}

int nts_seal_reply(nts_state *st, int slot, uint8_t *reply) {
    seal_job *job = &st->jobs[slot];
    siv_key *k = &st->s2c[slot];
    uint8_t d[16], *tag = reply + job->auth_at + 8 + NONCE_LEN, *plain = tag + TAG_LEN;
    memcpy(d, k->d0, 16);
    if (s2v_add(k, d, reply, job->auth_at, st->scratch)) return -1;  /* the header and the UID field */
    dbl(d);  /* then the nonce, whose CMAC was taken beforehand */
    xor16(d, job->nonce_mac);
    if (s2v_finish(k, d, plain, job->plain_len, tag, st->scratch)) return -1;
    return siv_ctr(k, tag, plain, plain, job->plain_len, st->scratch);
}
