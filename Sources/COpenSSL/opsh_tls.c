#include "opsh_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct opsh_tls {
    SSL_CTX *context;
    SSL *ssl;
    int fd;
};

static const unsigned char alpn_postgresql[] = "\x0apostgresql";

// MARK: The socket BIO
// OpenSSL's own socket BIO writes with write(2): a server that went away
// would raise SIGPIPE and kill opsh. This one sends with MSG_NOSIGNAL (as
// Socket.swift does, and libpq) and reports EINTR and EAGAIN as "retry".

static int bio_retryable(int code) { return code == EINTR || code == EAGAIN || code == EWOULDBLOCK; }

static int bio_write(BIO *bio, const char *data, int length) {
    int fd = (int)(intptr_t)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    ssize_t count = send(fd, data, (size_t)length, MSG_NOSIGNAL);
    if (count < 0 && bio_retryable(errno)) BIO_set_retry_write(bio);
    return (int)count;
}

static int bio_read(BIO *bio, char *data, int length) {
    int fd = (int)(intptr_t)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    ssize_t count = recv(fd, data, (size_t)length, 0);
    if (count < 0 && bio_retryable(errno)) BIO_set_retry_read(bio);
    return (int)count;
}

static long bio_control(BIO *bio, int command, long number, void *pointer) {
    (void)bio; (void)number; (void)pointer;
    return command == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *bio) {
    BIO_set_init(bio, 1);
    return 1;
}

static BIO_METHOD *socket_method;
static pthread_once_t socket_method_once = PTHREAD_ONCE_INIT;

static void make_socket_method(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "opsh socket");
    if (!method) return;
    BIO_meth_set_write(method, bio_write);
    BIO_meth_set_read(method, bio_read);
    BIO_meth_set_ctrl(method, bio_control);
    BIO_meth_set_create(method, bio_create);
    socket_method = method;
}

// MARK: Errors

/// OpenSSL's reason for the failure of the last call, in `error`.
static void describe(SSL *ssl, int result, const char *what, char *error, size_t size) {
    int code = ssl ? SSL_get_error(ssl, result) : SSL_ERROR_SSL;
    unsigned long failure = ERR_get_error();
    const char *reason = failure ? ERR_reason_error_string(failure) : NULL;
    if (code == SSL_ERROR_SYSCALL && !failure) {
        if (result == 0 || errno == 0) {
            snprintf(error, size, "%s: the server closed the connection", what);
        } else {
            snprintf(error, size, "%s: %s", what, strerror(errno));
        }
    } else if (failure && ERR_GET_REASON(failure) == SSL_R_CERTIFICATE_VERIFY_FAILED && ssl) {
        snprintf(error, size, "%s: certificate verify failed: %s", what,
                 X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
    } else if (reason) {
        snprintf(error, size, "%s: %s", what, reason);
    } else if (failure) {
        snprintf(error, size, "%s: OpenSSL error %lu", what, failure);
    } else {
        snprintf(error, size, "%s: TLS error %d", what, code);
    }
    ERR_clear_error();
}

/// Never asks for a key's passphrase on the terminal (OpenSSL's default):
/// an encrypted key fails to load, with the reason.
static int no_passphrase(char *buffer, int size, int writing, void *data) {
    (void)buffer; (void)size; (void)writing; (void)data;
    return -1;
}

// MARK: Waiting

static double monotonic_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec * 1000.0 + (double)now.tv_nsec / 1e6;
}

/// poll(2) on `fd` for `events` until `deadline` (monotonic ms, negative:
/// none), across EINTR: 1 ready, 0 timed out, -1 failed.
static int wait_for(int fd, short events, double deadline) {
    for (;;) {
        int timeout = -1;
        if (deadline >= 0) {
            double left = deadline - monotonic_ms();
            timeout = left <= 0 ? 0 : (int)(left + 0.999);
        }
        struct pollfd entry = {.fd = fd, .events = events, .revents = 0};
        int result = poll(&entry, 1, timeout);
        if (result > 0) return 1;
        if (result == 0) {
            if (deadline < 0 || monotonic_ms() >= deadline) return 0;
            continue;
        }
        if (errno != EINTR) return -1;
    }
}

/// After an SSL call returned `result`: 1 to retry (having waited for the
/// socket), 0 to stop (and `*code` says why).
static int wait_to_retry(opsh_tls *tls, int result, double deadline, int *code) {
    int error = SSL_get_error(tls->ssl, result);
    *code = error;
    short events;
    if (error == SSL_ERROR_WANT_READ) events = POLLIN;
    else if (error == SSL_ERROR_WANT_WRITE) events = POLLOUT;
    else return 0;
    int ready = wait_for(tls->fd, events, deadline);
    if (ready == 1) return 1;
    *code = ready == 0 ? -2 : SSL_ERROR_SYSCALL;
    return 0;
}

// MARK: The session

opsh_tls *opsh_tls_start(int fd, const opsh_tls_settings *settings, int timeout_ms, int *status,
                         char *error, size_t error_size) {
    *status = OPSH_TLS_FAILED;
    ERR_clear_error();
    pthread_once(&socket_method_once, make_socket_method);
    if (!socket_method) {
        snprintf(error, error_size, "could not set up TLS: out of memory");
        return NULL;
    }
    opsh_tls *tls = calloc(1, sizeof *tls);
    if (!tls) {
        snprintf(error, error_size, "could not set up TLS: out of memory");
        return NULL;
    }
    tls->fd = fd;
    tls->context = SSL_CTX_new(TLS_client_method());
    if (!tls->context) {
        describe(NULL, 0, "could not set up TLS", error, error_size);
        goto fail;
    }
    // libpq's default ssl_min_protocol_version.
    SSL_CTX_set_min_proto_version(tls->context, TLS1_2_VERSION);
    SSL_CTX_set_mode(tls->context, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_default_passwd_cb(tls->context, no_passphrase);
    if (settings->root_file && SSL_CTX_load_verify_locations(tls->context, settings->root_file, NULL) != 1) {
        char what[4200];
        snprintf(what, sizeof what, "could not read root certificate file \"%s\"", settings->root_file);
        describe(NULL, 0, what, error, error_size);
        goto fail;
    }
    if (settings->system_roots && SSL_CTX_set_default_verify_paths(tls->context) != 1) {
        describe(NULL, 0, "could not load the system's root certificates", error, error_size);
        goto fail;
    }
    SSL_CTX_set_verify(tls->context, settings->verify_chain ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (settings->cert_file && SSL_CTX_use_certificate_chain_file(tls->context, settings->cert_file) != 1) {
        char what[4200];
        snprintf(what, sizeof what, "could not read certificate file \"%s\"", settings->cert_file);
        describe(NULL, 0, what, error, error_size);
        goto fail;
    }
    if (settings->key_pem) {
        BIO *memory = BIO_new_mem_buf(settings->key_pem, (int)settings->key_pem_length);
        EVP_PKEY *key = memory ? PEM_read_bio_PrivateKey(memory, NULL, no_passphrase, NULL) : NULL;
        BIO_free(memory);
        if (!key) {
            describe(NULL, 0, "could not load private key file (opsh reads unencrypted PEM keys only)", error, error_size);
            goto fail;
        }
        int used = SSL_CTX_use_PrivateKey(tls->context, key);
        EVP_PKEY_free(key);
        if (used != 1) {
            describe(NULL, 0, "could not use the private key", error, error_size);
            goto fail;
        }
        if (SSL_CTX_check_private_key(tls->context) != 1) {
            describe(NULL, 0, "certificate does not match private key file", error, error_size);
            goto fail;
        }
    }
    tls->ssl = SSL_new(tls->context);
    if (!tls->ssl) {
        describe(NULL, 0, "could not set up TLS", error, error_size);
        goto fail;
    }
    BIO *bio = BIO_new(socket_method);
    if (!bio) {
        describe(NULL, 0, "could not set up TLS", error, error_size);
        goto fail;
    }
    BIO_set_data(bio, (void *)(intptr_t)fd);
    SSL_set_bio(tls->ssl, bio, bio);
    if (settings->server_name && SSL_set_tlsext_host_name(tls->ssl, settings->server_name) != 1) {
        describe(tls->ssl, 0, "could not set the server name (SNI)", error, error_size);
        goto fail;
    }
    // SSL_set_alpn_protos returns 0 on success.
    if (SSL_set_alpn_protos(tls->ssl, alpn_postgresql, sizeof alpn_postgresql - 1) != 0) {
        describe(NULL, 0, "could not set ALPN", error, error_size);
        goto fail;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        snprintf(error, error_size, "could not make the socket non-blocking: %s", strerror(errno));
        goto fail;
    }
    double deadline = timeout_ms < 0 ? -1 : monotonic_ms() + timeout_ms;
    for (;;) {
        ERR_clear_error();
        errno = 0;
        int result = SSL_connect(tls->ssl);
        if (result == 1) break;
        int code = 0;
        if (wait_to_retry(tls, result, deadline, &code)) continue;
        if (code == -2) {
            *status = OPSH_TLS_TIMED_OUT;
            snprintf(error, error_size, "no answer to the TLS handshake");
        } else {
            if (code == SSL_ERROR_ZERO_RETURN || (code == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0))
                *status = OPSH_TLS_CLOSED;
            describe(tls->ssl, result, "SSL error", error, error_size);
        }
        goto fail;
    }
    *status = 0;
    return tls;

fail:
    if (tls->ssl) SSL_free(tls->ssl);
    if (tls->context) SSL_CTX_free(tls->context);
    free(tls);
    ERR_clear_error();
    return NULL;
}

void opsh_tls_free(opsh_tls *tls) {
    if (!tls) return;
    ERR_clear_error();
    SSL_shutdown(tls->ssl);  // one try: close_notify if the socket takes it now
    SSL_free(tls->ssl);
    SSL_CTX_free(tls->context);
    ERR_clear_error();
    free(tls);
}

long opsh_tls_read(opsh_tls *tls, void *buffer, size_t length, char *error, size_t error_size) {
    if (length > 0x7fffffff) length = 0x7fffffff;
    for (;;) {
        ERR_clear_error();
        errno = 0;
        int result = SSL_read(tls->ssl, buffer, (int)length);
        if (result > 0) return result;
        int code = 0;
        if (wait_to_retry(tls, result, -1, &code)) continue;
        // The end of the stream, with close_notify or without (a server
        // process that exited): closed, as a plain socket says.
        if (code == SSL_ERROR_ZERO_RETURN) return OPSH_TLS_CLOSED;
        if (code == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && (result == 0 || errno == 0)) return OPSH_TLS_CLOSED;
        if (code == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
            ERR_clear_error();
            return OPSH_TLS_CLOSED;
        }
        describe(tls->ssl, result, "SSL error", error, error_size);
        return OPSH_TLS_FAILED;
    }
}

int opsh_tls_write(opsh_tls *tls, const void *data, size_t length, char *error, size_t error_size) {
    size_t sent = 0;
    while (sent < length) {
        size_t chunk = length - sent;
        if (chunk > 0x40000000) chunk = 0x40000000;
        ERR_clear_error();
        errno = 0;
        int result = SSL_write(tls->ssl, (const char *)data + sent, (int)chunk);
        if (result > 0) {
            sent += (size_t)result;
            continue;
        }
        int code = 0;
        if (wait_to_retry(tls, result, -1, &code)) continue;
        if (code == SSL_ERROR_ZERO_RETURN) return OPSH_TLS_CLOSED;
        describe(tls->ssl, result, "SSL error", error, error_size);
        return OPSH_TLS_FAILED;
    }
    return 0;
}

int opsh_tls_wait_readable(opsh_tls *tls, int timeout_ms) {
    double deadline = timeout_ms < 0 ? -1 : monotonic_ms() + timeout_ms;
    for (;;) {
        if (SSL_pending(tls->ssl) > 0) return 1;
        int ready = wait_for(tls->fd, POLLIN, deadline);
        if (ready != 1) return ready;
        // Readable bytes may be a record without data (a session ticket, a
        // key update): peek processes them without waiting.
        char byte;
        ERR_clear_error();
        int result = SSL_peek(tls->ssl, &byte, 1);
        if (result > 0) return 1;
        int code = SSL_get_error(tls->ssl, result);
        ERR_clear_error();
        if (code == SSL_ERROR_WANT_READ) continue;
        if (code == SSL_ERROR_WANT_WRITE) {
            if (wait_for(tls->fd, POLLOUT, deadline) != 1) return 0;
            continue;
        }
        return 1;  // the end or an error: the next read reports it
    }
}

int opsh_tls_check_host(opsh_tls *tls, const char *host, int is_ip_address) {
    X509 *certificate = SSL_get1_peer_certificate(tls->ssl);
    if (!certificate) return 0;
    int match = is_ip_address ? X509_check_ip_asc(certificate, host, 0) : X509_check_host(certificate, host, 0, 0, NULL);
    X509_free(certificate);
    return match == 1;
}

size_t opsh_tls_peer_names(opsh_tls *tls, char *out, size_t size) {
    if (size == 0) return 0;
    out[0] = 0;
    X509 *certificate = SSL_get1_peer_certificate(tls->ssl);
    if (!certificate) return 0;
    size_t used = 0;
    GENERAL_NAMES *names = X509_get_ext_d2i(certificate, NID_subject_alt_name, NULL, NULL);
    int count = names ? sk_GENERAL_NAME_num(names) : 0;
    for (int i = 0; i < count && used + 1 < size; i++) {
        const GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
        char text[256] = "";
        if (name->type == GEN_DNS) {
            const ASN1_IA5STRING *value = name->d.dNSName;
            snprintf(text, sizeof text, "DNS:%.*s", ASN1_STRING_length(value), (const char *)ASN1_STRING_get0_data(value));
        } else if (name->type == GEN_IPADD) {
            const ASN1_OCTET_STRING *value = name->d.iPAddress;
            const unsigned char *bytes = ASN1_STRING_get0_data(value);
            int length = ASN1_STRING_length(value);
            if (length == 4) {
                snprintf(text, sizeof text, "IP:%u.%u.%u.%u", bytes[0], bytes[1], bytes[2], bytes[3]);
            } else if (length == 16) {
                int at = snprintf(text, sizeof text, "IP:");
                for (int j = 0; j < 16; j += 2) at += snprintf(text + at, sizeof text - at, "%s%x", j ? ":" : "", bytes[j] << 8 | bytes[j + 1]);
            }
        }
        if (!text[0]) continue;
        int written = snprintf(out + used, size - used, "%s%s", used ? ", " : "", text);
        if (written > 0) used += (size_t)written < size - used ? (size_t)written : size - used - 1;
    }
    GENERAL_NAMES_free(names);
    if (used == 0) {
        char common[256] = "";
        X509_NAME_get_text_by_NID(X509_get_subject_name(certificate), NID_commonName, common, sizeof common);
        int written = snprintf(out, size, "CN=%s", common);
        used = written < 0 ? 0 : ((size_t)written < size ? (size_t)written : size - 1);
    }
    X509_free(certificate);
    return used;
}

int opsh_tls_server_end_point(opsh_tls *tls, uint8_t *out, size_t size) {
    X509 *certificate = SSL_get1_peer_certificate(tls->ssl);
    if (!certificate) return -1;
    int digest_nid = NID_undef;
    int result = -1;
    if (X509_get_signature_info(certificate, &digest_nid, NULL, NULL, NULL) == 1) {
        // RFC 5929, section 4.1: MD5 and SHA-1 become SHA-256.
        if (digest_nid == NID_md5 || digest_nid == NID_sha1) digest_nid = NID_sha256;
        const EVP_MD *digest = EVP_get_digestbynid(digest_nid);
        unsigned int length = 0;
        unsigned char hash[EVP_MAX_MD_SIZE];
        if (digest && X509_digest(certificate, digest, hash, &length) == 1 && length <= size) {
            memcpy(out, hash, length);
            result = (int)length;
        }
    }
    X509_free(certificate);
    ERR_clear_error();
    return result;
}

int opsh_tls_alpn_is_postgresql(opsh_tls *tls) {
    const unsigned char *selected = NULL;
    unsigned int length = 0;
    SSL_get0_alpn_selected(tls->ssl, &selected, &length);
    return selected && length == sizeof alpn_postgresql - 2 && memcmp(selected, alpn_postgresql + 1, length) == 0;
}

const char *opsh_tls_protocol(opsh_tls *tls) { return SSL_get_version(tls->ssl); }
