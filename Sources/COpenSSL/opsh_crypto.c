#include "opsh_crypto.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

// OpenSSL takes NULL with a length of 0 in most places but not all; an
// empty Swift array may hand over NULL.
static const unsigned char empty[1];
#define OR_EMPTY(pointer) ((pointer) ? (const unsigned char *)(pointer) : empty)

int opsh_sha256(const void *data, size_t length, uint8_t out[32]) {
    unsigned int size = 0;
    return EVP_Digest(OR_EMPTY(data), length, out, &size, EVP_sha256(), NULL) == 1 && size == 32;
}

int opsh_md5(const void *data, size_t length, uint8_t out[16]) {
    unsigned int size = 0;
    return EVP_Digest(OR_EMPTY(data), length, out, &size, EVP_md5(), NULL) == 1 && size == 16;
}

int opsh_hmac_sha256(const void *key, size_t key_length, const void *data, size_t length, uint8_t out[32]) {
    unsigned int size = 0;
    if (key_length > 0x7fffffff) return 0;
    return HMAC(EVP_sha256(), OR_EMPTY(key), (int)key_length, OR_EMPTY(data), length, out, &size) != NULL && size == 32;
}

int opsh_pbkdf2_sha256(const void *password, size_t password_length, const void *salt, size_t salt_length,
                       int iterations, uint8_t out[32]) {
    if (password_length > 0x7fffffff || salt_length > 0x7fffffff || iterations < 1) return 0;
    return PKCS5_PBKDF2_HMAC((const char *)OR_EMPTY(password), (int)password_length, OR_EMPTY(salt), (int)salt_length,
                             iterations, EVP_sha256(), 32, out) == 1;
}
