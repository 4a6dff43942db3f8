#ifndef OPSH_CRYPTO_H
#define OPSH_CRYPTO_H

// The digests opsh needs, from OpenSSL's EVP interface: SHA-256 (the audit
// chain, script digests, SCRAM), HMAC-SHA-256 and PBKDF2-HMAC-SHA-256
// (SCRAM-SHA-256), MD5 (PostgreSQL's md5 login). Each returns 1 on success,
// 0 when OpenSSL failed (out of memory): no cryptography of opsh's own
// (ARCHITECTURE.md, "PostgreSQL: names, types, the client library").

#include <stddef.h>
#include <stdint.h>

int opsh_sha256(const void *data, size_t length, uint8_t out[32]);
int opsh_md5(const void *data, size_t length, uint8_t out[16]);
int opsh_hmac_sha256(const void *key, size_t key_length, const void *data, size_t length, uint8_t out[32]);
int opsh_pbkdf2_sha256(const void *password, size_t password_length, const void *salt, size_t salt_length,
                       int iterations, uint8_t out[32]);

#endif
