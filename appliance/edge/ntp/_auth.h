/*
 * _auth.h: NTP symmetric-key authentication (RFC 5905 §7.3, §9.2; RFC 8573) for the native data plane, over
 * OpenSSL's libcrypto.  No Python here.  The keys come from the keys file the worker loaded
 * (appliance/protocol/ntp/auth.py parses it: the policy); the decisions (which MAC layouts are recognised, what a
 * bad MAC earns, how a reply is signed) are made here only.
 *
 * Recognised trailers after the 48-byte header (RFC 7822 §7.5, "MAC only"): 4 zero bytes (a crypto-NAK), 20 bytes
 * (key ID + MD5 or AES-CMAC digest) and 24 bytes (key ID + SHA1 digest).  Any other trailer is not a MAC: the
 * request is answered unauthenticated (extension fields the server does not know are ignored).  The legacy MAC is
 * digest(secret || header), not HMAC, as every NTP peer computes it; AES-CMAC is RFC 4493's, a 128-bit tag.
 */
#ifndef APPLIANCE_AUTH_H
#define APPLIANCE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define AUTH_MAX_KEYS 65534     /* key IDs 1..65534, ntpd's range */
#define AUTH_MAX_SECRET 128     /* bytes */

enum { AUTH_MD5 = 1, AUTH_SHA1 = 2, AUTH_AES128 = 3 };

/* auth_verify's verdicts: NONE (no MAC, or a crypto-NAK request: answered unauthenticated), OK (sign the reply
   with the key), FAIL (unknown key, a digest of the wrong size, or a MAC that does not verify: a crypto-NAK). */
enum { AUTH_NONE = 0, AUTH_OK = 1, AUTH_FAIL = 2 };

typedef struct auth_keys auth_keys;

auth_keys *auth_new(void);
void auth_free(auth_keys *keys);
/* Add one key; -1 if the id is outside 1..65534, the type unknown, the secret empty, too long, or not 16 bytes for
   AES128, or the id already held. */
int auth_add(auth_keys *keys, uint32_t id, int type, const uint8_t *secret, size_t len);
int auth_count(const auth_keys *keys);
/* The request's MAC against the keys (NULL keys: none configured).  On AUTH_OK *key_index names the key. */
int auth_verify(const auth_keys *keys, const uint8_t *d, size_t len, int *key_index);
/* Sign the 48-byte header at packet: writes the key ID and digest after it and returns the whole length, or 0 if
   libcrypto failed (the caller then sends nothing rather than an unsigned reply). */
size_t auth_sign(const auth_keys *keys, int key_index, uint8_t *packet);

#endif
