#ifndef OPSH_TLS_H
#define OPSH_TLS_H

// A TLS client session over a connected stream socket, for PostgreSQL's
// wire client (Sources/PostgresWire/TLS): OpenSSL's SSL object behind a
// handful of calls Swift can use without OpenSSL's macros. The socket is
// non-blocking once the session starts; reads and writes wait in poll(2),
// so a blocking caller sees blocking calls, and a caller with a deadline
// can wait for readable data (opsh_tls_wait_readable) without being stuck
// on a TLS record that carries none.

#include <stddef.h>
#include <stdint.h>

typedef struct opsh_tls opsh_tls;

typedef struct {
    /// 1: the handshake fails unless the server's certificate chain leads
    /// to one of the trusted roots below.
    int verify_chain;
    /// A PEM file of trusted root certificates, or NULL.
    const char *root_file;
    /// 1: also trust OpenSSL's default CA store (sslrootcert=system).
    int system_roots;
    /// The client's certificate chain (a PEM file), or NULL.
    const char *cert_file;
    /// The client's private key as PEM bytes (read by the caller, who
    /// checked the file's permissions), or NULL.
    const void *key_pem;
    size_t key_pem_length;
    /// The host name sent as SNI, or NULL (never an IP address).
    const char *server_name;
} opsh_tls_settings;

typedef enum opsh_tls_status {
    OPSH_TLS_FAILED = -1,
    OPSH_TLS_TIMED_OUT = -2,
    /// The peer closed the connection.
    OPSH_TLS_CLOSED = -3,
} opsh_tls_status;

/// Runs the handshake on the connected socket `fd` within `timeout_ms`
/// (negative: no limit), offering ALPN "postgresql". NULL on failure, with
/// *status (OPSH_TLS_FAILED, OPSH_TLS_TIMED_OUT, OPSH_TLS_CLOSED) and the
/// reason in `error`. The socket stays the caller's (closed by the caller
/// after opsh_tls_free).
opsh_tls *opsh_tls_start(int fd, const opsh_tls_settings *settings, int timeout_ms, int *status,
                         char *error, size_t error_size);

/// Sends close_notify if the socket takes it at once, and frees the session.
void opsh_tls_free(opsh_tls *tls);

/// Reads up to `length` decrypted bytes, waiting until at least one is
/// there: the count, OPSH_TLS_CLOSED or OPSH_TLS_FAILED (with `error`).
long opsh_tls_read(opsh_tls *tls, void *buffer, size_t length, char *error, size_t error_size);

/// Writes every byte: 0, OPSH_TLS_CLOSED or OPSH_TLS_FAILED (with `error`).
int opsh_tls_write(opsh_tls *tls, const void *data, size_t length, char *error, size_t error_size);

/// Waits up to `timeout_ms` (negative: forever) until decrypted data (or the
/// end of the stream, or an error) can be read: 1, or 0 when the time ran
/// out, -1 when poll failed (errno).
int opsh_tls_wait_readable(opsh_tls *tls, int timeout_ms);

/// 1 when the server's certificate names `host` (an IP address when
/// `is_ip_address`): its subjectAltName entries of that kind, or its
/// common name when it has no DNS names (OpenSSL's X509_check_host).
int opsh_tls_check_host(opsh_tls *tls, const char *host, int is_ip_address);

/// The names in the server's certificate, "DNS:a, IP Address:b" or
/// "CN=c" when it has none, for messages: the length written.
size_t opsh_tls_peer_names(opsh_tls *tls, char *out, size_t size);

/// tls-server-end-point channel binding data (RFC 5929): the hash of the
/// server's certificate with its signature's hash (SHA-256 for MD5 and
/// SHA-1). The length, or -1.
int opsh_tls_server_end_point(opsh_tls *tls, uint8_t *out, size_t size);

/// 1 when the server chose ALPN "postgresql".
int opsh_tls_alpn_is_postgresql(opsh_tls *tls);

/// The protocol version in use ("TLSv1.3").
const char *opsh_tls_protocol(opsh_tls *tls);

#endif
