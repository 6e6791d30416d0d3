/*
 * _nts.h: NTS (RFC 8915) for the NTP fast path, in C over OpenSSL's libcrypto.  No Python here: _fastpath.c calls
 * it for the requests that carry a Unique Identifier while it holds cookie keys.  Byte for byte what
 * appliance/protocol/ntp/nts.py (CookieJar, open_request, seal_reply, nak_fields) and the replay table of
 * appliance/outputs/ntp/server.py do; see _nts.c.
 */
#ifndef APPLIANCE_NTS_H
#define APPLIANCE_NTS_H

#include <stddef.h>
#include <stdint.h>

#define NTS_MAX_KEYS 16   /* master keys held at once (the NTS-KE process keeps 4) */
#define NTS_SLOTS 64      /* replies of one batch being sealed (the fast path's BATCH) */

typedef struct nts_state nts_state;

/* nts_open's verdicts, in server.py's words */
enum { NTS_OK, NTS_NAK, NTS_DROP_MALFORMED, NTS_DROP_REPLAY, NTS_UNDECIDED };

typedef struct {
    const uint8_t *uid;   /* the Unique Identifier's body, inside the request */
    size_t uid_len;
    int cookies_wanted;   /* 1 + placeholders */
    size_t request_len;
    uint8_t c2s[32], s2c[32];
} nts_request;

nts_state *nts_new(uint32_t replay_table);
void nts_free(nts_state *st);
/* The master keys, oldest first (the last seals); each keylen bytes (32, 48 or 64).  0 keys: none held.  -1 on a
   bad length or a libcrypto failure (the keys held before are then gone too). */
int nts_set_keys(nts_state *st, int n, const uint32_t *ids, const uint8_t *keys, size_t keylen);
int nts_key_count(const nts_state *st);
/* nts.is_nts: extension fields tiling the rest of the packet (NTS's rule: at least 4 bytes each), one a UID. */
int nts_is_nts(const uint8_t *d, size_t len);
/* nts.open_request, then the replay table for an authenticated one; NTS_UNDECIDED when no random bytes could be
   had for its reply (the caller leaves the request to Python).  On NTS_OK and NTS_NAK, rq is filled. */
int nts_open(nts_state *st, const uint8_t *d, size_t len, nts_request *rq);
/* nts.nak_fields: writes the Unique Identifier field at out, returns its length. */
size_t nts_nak_fields(const nts_request *rq, uint8_t *out);
/* nts.seal_reply in two halves.  prepare (before the transmit timestamp is read): writes after the 48-byte header
   at reply the UID field and the Authenticator with fresh cookies still in clear, and returns the reply's whole
   length (0 on failure).  seal (once the header is final): the tag over header and UID field, the cookies
   encrypted in place.  `slot` < NTS_SLOTS: one per reply of the batch.  0 on success. */
size_t nts_prepare_reply(nts_state *st, int slot, const nts_request *rq, uint8_t *reply);
int nts_seal_reply(nts_state *st, int slot, uint8_t *reply);

#endif
