import COpenSSL
import Glibc

/// One TLS session over a connected socket: OpenSSL's client, through
/// COpenSSL. The socket is non-blocking from the handshake on; reading and
/// writing wait in poll(2) inside COpenSSL, so ``Socket`` keeps blocking
/// calls. A value of ``TLSSettings/Files`` decides what is trusted and what
/// the client presents.
final class TLSSession {
    private var handle: OpaquePointer?

    private init(handle: OpaquePointer) {
        self.handle = handle
    }

    deinit { close() }

    /// Why a handshake failed, for the caller's fallback (sslmode=prefer
    /// retries in clear text after a failed handshake, as libpq does).
    struct HandshakeFailure: Error {
        let reason: String
        let timedOut: Bool
        let closedByServer: Bool
    }

    /// Runs the handshake on `descriptor` within `timeout` seconds.
    static func start(on descriptor: Int32, files: TLSSettings.Files, serverName: String?, timeout: Double) throws -> TLSSession {
        var status: Int32 = 0
        var error = [CChar](repeating: 0, count: 1024)
        let milliseconds = timeout.isFinite ? Int32(clamping: Int((max(timeout, 0) * 1000).rounded(.up))) : -1
        let handle: OpaquePointer? = withOptionalCString(files.rootFile) { rootFile in
            withOptionalCString(files.certificateFile) { certificateFile in
                withOptionalCString(serverName) { serverName in
                    (files.keyPEM ?? []).withUnsafeBytes { key in
                        var settings = opsh_tls_settings(
                            verify_chain: files.verifyChain ? 1 : 0, root_file: rootFile,
                            system_roots: files.systemRoots ? 1 : 0, cert_file: certificateFile,
                            key_pem: files.keyPEM == nil ? nil : key.baseAddress, key_pem_length: key.count,
                            server_name: serverName)
                        return opsh_tls_start(descriptor, &settings, milliseconds, &status, &error, error.count)
                    }
                }
            }
        }
        guard let handle else {
            throw HandshakeFailure(reason: cText(error), timedOut: status == OPSH_TLS_TIMED_OUT.rawValue,
                                   closedByServer: status == OPSH_TLS_CLOSED.rawValue)
        }
        return TLSSession(handle: handle)
    }

    func close() {
        if let handle { opsh_tls_free(handle) }
        handle = nil
    }

    /// Writes every byte, or throws.
    func write(_ bytes: [UInt8]) throws {
        guard let handle else { throw PostgresClientError.connectionClosed("the socket is closed") }
        var error = [CChar](repeating: 0, count: 512)
        let result = bytes.withUnsafeBytes { opsh_tls_write(handle, $0.baseAddress, $0.count, &error, error.count) }
        if result == OPSH_TLS_CLOSED.rawValue { throw PostgresClientError.connectionClosed(PostgresConnection.closedByPeer) }
        if result != 0 { throw PostgresClientError.connectionClosed("writing to the server: \(cText(error))") }
    }

    /// Reads what is available (at least one byte, waiting for it).
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let handle else { throw PostgresClientError.connectionClosed("the socket is closed") }
        var error = [CChar](repeating: 0, count: 512)
        let count = opsh_tls_read(handle, buffer.baseAddress, buffer.count, &error, error.count)
        if count > 0 { return count }
        if count == Int(OPSH_TLS_CLOSED.rawValue) { throw PostgresClientError.connectionClosed(PostgresConnection.closedByPeer) }
        throw PostgresClientError.connectionClosed(cText(error))
    }

    /// Waits up to `timeout` seconds (negative: forever) for data to read:
    /// true when some (or the end of the stream) is there.
    func waitReadable(timeout: Double) throws -> Bool {
        guard let handle else { throw PostgresClientError.connectionClosed("the socket is closed") }
        let milliseconds = timeout < 0 ? -1 : Int32(clamping: Int((timeout * 1000).rounded(.up)))
        let result = opsh_tls_wait_readable(handle, milliseconds)
        if result < 0 { throw PostgresClientError.connectionClosed("poll: \(Socket.errorText(errno))") }
        return result == 1
    }

    /// Whether the server's certificate names `host` (verify-full).
    func certificateNames(host: String) -> Bool {
        guard let handle else { return false }
        return opsh_tls_check_host(handle, host, Self.isIPAddress(host) ? 1 : 0) == 1
    }

    /// The names the server's certificate carries ("DNS:localhost"), for messages.
    var certificateNames: String {
        guard let handle else { return "" }
        var text = [CChar](repeating: 0, count: 1024)
        _ = opsh_tls_peer_names(handle, &text, text.count)
        return cText(text)
    }

    /// tls-server-end-point channel binding data, for SCRAM-SHA-256-PLUS.
    var serverEndPoint: [UInt8]? {
        guard let handle else { return nil }
        var hash = [UInt8](repeating: 0, count: 64)
        let count = opsh_tls_server_end_point(handle, &hash, hash.count)
        return count > 0 ? Array(hash.prefix(Int(count))) : nil
    }

    /// Whether the server chose ALPN `postgresql` (required after a direct start).
    var choseALPNPostgreSQL: Bool {
        guard let handle else { return false }
        return opsh_tls_alpn_is_postgresql(handle) == 1
    }

    /// An IPv4 or IPv6 address (not a host name): checked against the
    /// certificate's IP addresses, and never sent as SNI.
    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}

/// A NUL-terminated C string in `buffer`, as text.
private func cText(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

private func withOptionalCString<T>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> T) -> T {
    guard let text else { return body(nil) }
    return text.withCString { body($0) }
}
