/* _auth.c: NTP symmetric-key MACs for the native data plane; see _auth.h. */
#include "_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_LEN 48

typedef struct {
    uint32_t id;
    int type;
    size_t len;
    uint8_t secret[AUTH_MAX_SECRET];
} auth_key;

struct auth_keys {
    auth_key *keys;  /* sorted by id */
    int n, cap;
    EVP_MAC *cmac;
};

auth_keys *auth_new(void) {
    auth_keys *k = calloc(1, sizeof(*k));
    if (!k) return NULL;
    k->cmac = EVP_MAC_fetch(NULL, "CMAC", NULL);
    if (!k->cmac) { free(k); return NULL; }
    return k;
}

void auth_free(auth_keys *k) {
    if (!k) return;
    if (k->keys) OPENSSL_cleanse(k->keys, sizeof(auth_key) * (size_t)k->cap);
    free(k->keys);
    EVP_MAC_free(k->cmac);
    free(k);
}

int auth_count(const auth_keys *k) { return k ? k->n : 0; }

static int digest_size(int type) { return type == AUTH_SHA1 ? 20 : 16; }

static int find(const auth_keys *k, uint32_t id) {
    int lo = 0, hi = k ? k->n - 1 : -1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (k->keys[mid].id == id) return mid;
        if (k->keys[mid].id < id) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

int auth_add(auth_keys *k, uint32_t id, int type, const uint8_t *secret, size_t len) {
    if (id < 1 || id > AUTH_MAX_KEYS || type < AUTH_MD5 || type > AUTH_AES128 || len == 0 || len > AUTH_MAX_SECRET)
        return -1;
    if (type == AUTH_AES128 && len != 16) return -1;
    if (find(k, id) >= 0) return -1;
    if (k->n == k->cap) {
        int cap = k->cap ? 2 * k->cap : 8;
        auth_key *grown = calloc((size_t)cap, sizeof(auth_key));
        if (!grown) return -1;
        if (k->keys) {
            memcpy(grown, k->keys, sizeof(auth_key) * (size_t)k->n);
            OPENSSL_cleanse(k->keys, sizeof(auth_key) * (size_t)k->cap);
            free(k->keys);
        }
        k->keys = grown;
        k->cap = cap;
    }
    int at = k->n;
    while (at > 0 && k->keys[at - 1].id > id) { k->keys[at] = k->keys[at - 1]; at--; }
    auth_key *e = &k->keys[at];
    e->id = id;
    e->type = type;
    e->len = len;
    memcpy(e->secret, secret, len);
    k->n++;
    return 0;
}

/* The digest of the 48-byte header under key e into out (16 or 20 bytes); 0 on success. */
static int mac(const auth_keys *k, const auth_key *e, const uint8_t *header, uint8_t *out) {
    if (e->type == AUTH_AES128) {
        EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(k->cmac);
        if (!ctx) return -1;
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, "AES-128-CBC", 0),
                               OSSL_PARAM_construct_end()};
        size_t outlen = 0;
        int ok = EVP_MAC_init(ctx, e->secret, e->len, params) && EVP_MAC_update(ctx, header, HEADER_LEN) &&
                 EVP_MAC_final(ctx, out, &outlen, 16) && outlen == 16;
        EVP_MAC_CTX_free(ctx);
        return ok ? 0 : -1;
    }
    uint8_t buf[AUTH_MAX_SECRET + HEADER_LEN];
    memcpy(buf, e->secret, e->len);
    memcpy(buf + e->len, header, HEADER_LEN);
    unsigned int outlen = 0;
    int ok = EVP_Digest(buf, e->len + HEADER_LEN, out, &outlen, e->type == AUTH_MD5 ? EVP_md5() : EVP_sha1(), NULL);
    OPENSSL_cleanse(buf, e->len);
    return ok && outlen == (unsigned)digest_size(e->type) ? 0 : -1;
}

int auth_verify(const auth_keys *k, const uint8_t *d, size_t len, int *key_index) {
    size_t trailer = len - HEADER_LEN;
    if (len <= HEADER_LEN || (trailer != 4 && trailer != 20 && trailer != 24)) return AUTH_NONE;
    uint32_t id = (uint32_t)d[48] << 24 | (uint32_t)d[49] << 16 | (uint32_t)d[50] << 8 | d[51];
    if (trailer == 4) return AUTH_NONE;  /* a crypto-NAK (a bare non-zero key ID is not a MAC layout) */
    int i = find(k, id);
    if (i < 0) return AUTH_FAIL;
    const auth_key *e = &k->keys[i];
    if (trailer - 4 != (size_t)digest_size(e->type)) return AUTH_FAIL;
    uint8_t expected[20];
    if (mac(k, e, d, expected)) return AUTH_FAIL;
    /* Constant time, so the answer's timing does not tell how much of a forged digest was right. */
    if (CRYPTO_memcmp(expected, d + 52, trailer - 4) != 0) return AUTH_FAIL;
    *key_index = i;
    return AUTH_OK;
}

size_t auth_sign(const auth_keys *k, int key_index, uint8_t *packet) {
    if (!k || key_index < 0 || key_index >= k->n) return 0;
    const auth_key *e = &k->keys[key_index];
    uint8_t *p = packet + HEADER_LEN;
    p[0] = (uint8_t)(e->id >> 24); p[1] = (uint8_t)(e->id >> 16); p[2] = (uint8_t)(e->id >> 8); p[3] = (uint8_t)e->id;
    if (mac(k, e, packet, p + 4)) return 0;
    return HEADER_LEN + 4 + (size_t)digest_size(e->type);
}
