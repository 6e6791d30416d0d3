/*
 * _ptpauth.h: the PTP AUTHENTICATION TLV (IEEE 1588-2019 16.14, immediate security processing, as linuxptp 4.x
 * writes it) for the native event sender, over OpenSSL's libcrypto.  The port's security association and active key
 * come from Python (appliance/protocol/ptp/security.py reads the sa_file: the policy); the sender signs what it sends
 * and checks the Delay_Reqs it answers with them here.
 *
 * A signed message ends with ``tlvType 0x8009, lengthField, spp, secParamIndicator 0, keyID, ICV``, messageLength
 * counting it; the ICV is the MAC of the message from its first octet up to the ICV, correctionField as zero when
 * the association allows it mutable.  SHA256-128 / SHA256: HMAC-SHA256 cut to 16 / 32 octets; AES128 / AES256: CMAC.
 */
#ifndef APPLIANCE_PTPAUTH_H
#define APPLIANCE_PTPAUTH_H

#include <stddef.h>
#include <stdint.h>

#define PTPAUTH_HEAD 10     /* tlvType, lengthField, spp, secParamIndicator, keyID */
#define PTPAUTH_MAX 42      /* the TLV with the longest ICV (32 octets) */
#define PTPAUTH_SECRET_MAX 128

enum { PTPAUTH_SHA256_128 = 1, PTPAUTH_SHA256 = 2, PTPAUTH_AES128 = 3, PTPAUTH_AES256 = 4 };

typedef struct ptp_auth ptp_auth;

/* NULL on a bad algorithm or key length, or libcrypto refusing the key. */
ptp_auth *ptpauth_new(int spp, uint32_t key_id, int algorithm, const uint8_t *secret, size_t len, int allow_mutable);
void ptpauth_free(ptp_auth *a);
/* Octets the TLV adds to a message. */
size_t ptpauth_extra(const ptp_auth *a);
/* Append the TLV to the `len`-octet message at msg (room for ptpauth_extra more), fix its messageLength; the new
   length, or 0 if libcrypto failed (the caller then sends nothing rather than an unsigned message). */
size_t ptpauth_sign(const ptp_auth *a, uint8_t *msg, size_t len);
/* 1 when the message (messageLength = len) is `body` octets followed by exactly this key's valid TLV. */
int ptpauth_verify(const ptp_auth *a, const uint8_t *msg, size_t len, size_t body);

#endif
