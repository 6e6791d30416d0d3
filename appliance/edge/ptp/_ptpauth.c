/* _ptpauth.c: the PTP AUTHENTICATION TLV for the native event sender; see _ptpauth.h. */
#include "_ptpauth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#define TLV_AUTHENTICATION 0x8009

struct ptp_auth {
    int spp, allow_mutable;
    uint32_t key_id;
    size_t icv_len;
    EVP_MAC_CTX *keyed;  /* initialised with the key: duplicated for each message */
};

ptp_auth *ptpauth_new(int spp, uint32_t key_id, int algorithm, const uint8_t *secret, size_t len, int allow_mutable) {
    if (spp < 0 || spp > 255 || len == 0 || len > PTPAUTH_SECRET_MAX) return NULL;
    if ((algorithm == PTPAUTH_AES128 && len != 16) || (algorithm == PTPAUTH_AES256 && len != 32)) return NULL;
    if (algorithm < PTPAUTH_SHA256_128 || algorithm > PTPAUTH_AES256) return NULL;
    int hmac = algorithm == PTPAUTH_SHA256_128 || algorithm == PTPAUTH_SHA256;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, hmac ? "HMAC" : "CMAC", NULL);
    if (!mac) return NULL;
    ptp_auth *a = calloc(1, sizeof(*a));
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);
    if (!a || !ctx) { free(a); EVP_MAC_CTX_free(ctx); return NULL; }
    OSSL_PARAM params[2];
    params[0] = hmac ? OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0)
                     : OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER,
                                                        algorithm == PTPAUTH_AES128 ? "AES-128-CBC" : "AES-256-CBC", 0);
    params[1] = OSSL_PARAM_construct_end();
    if (!EVP_MAC_init(ctx, secret, len, params)) { free(a); EVP_MAC_CTX_free(ctx); return NULL; }
    a->spp = spp;
    a->allow_mutable = allow_mutable;
    a->key_id = key_id;
    a->icv_len = algorithm == PTPAUTH_SHA256 ? 32 : 16;
    a->keyed = ctx;
    return a;
}

void ptpauth_free(ptp_auth *a) {
    if (!a) return;
    EVP_MAC_CTX_free(a->keyed);
    free(a);
}

size_t ptpauth_extra(const ptp_auth *a) { return PTPAUTH_HEAD + a->icv_len; }

/* The ICV of msg[0:len) into out (icv_len octets); 0 on success. */
static int icv(const ptp_auth *a, const uint8_t *msg, size_t len, uint8_t *out) {
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_dup(a->keyed);
    if (!ctx) return -1;
    static const uint8_t zero[8];
    uint8_t full[32];
    size_t outlen = 0;
    int ok = a->allow_mutable ? EVP_MAC_update(ctx, msg, 8) && EVP_MAC_update(ctx, zero, 8) &&
                                    EVP_MAC_update(ctx, msg + 16, len - 16)
                              : EVP_MAC_update(ctx, msg, len);
    ok = ok && EVP_MAC_final(ctx, full, &outlen, sizeof(full)) && outlen >= a->icv_len;
    EVP_MAC_CTX_free(ctx);
    if (!ok) return -1;
    memcpy(out, full, a->icv_len);
    return 0;
}

static void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

size_t ptpauth_sign(const ptp_auth *a, uint8_t *msg, size_t len) {
    size_t total = len + PTPAUTH_HEAD + a->icv_len;
    put16(msg + 2, (unsigned)total);
    uint8_t *t = msg + len;
    put16(t, TLV_AUTHENTICATION);
    put16(t + 2, (unsigned)(PTPAUTH_HEAD - 4 + a->icv_len));
    t[4] = (uint8_t)a->spp;
    t[5] = 0;
    t[6] = (uint8_t)(a->key_id >> 24); t[7] = (uint8_t)(a->key_id >> 16);
    t[8] = (uint8_t)(a->key_id >> 8); t[9] = (uint8_t)a->key_id;
    if (icv(a, msg, len + PTPAUTH_HEAD, t + PTPAUTH_HEAD)) return 0;
    return total;
}

int ptpauth_verify(const ptp_auth *a, const uint8_t *msg, size_t len, size_t body) {
    if (len != body + PTPAUTH_HEAD + a->icv_len) return 0;
    if ((size_t)(msg[2] << 8 | msg[3]) != len) return 0;
    const uint8_t *t = msg + body;
    if ((t[0] << 8 | t[1]) != TLV_AUTHENTICATION || (size_t)(t[2] << 8 | t[3]) != PTPAUTH_HEAD - 4 + a->icv_len)
        return 0;
    uint32_t key_id = (uint32_t)t[6] << 24 | (uint32_t)t[7] << 16 | (uint32_t)t[8] << 8 | t[9];
    if (t[4] != a->spp || t[5] != 0 || key_id != a->key_id) return 0;
    uint8_t expected[32];
    if (icv(a, msg, body + PTPAUTH_HEAD, expected)) return 0;
    return CRYPTO_memcmp(expected, t + PTPAUTH_HEAD, a->icv_len) == 0;
}
