import Glibc

extension Socket {
    /// SSLRequest's code (PostgreSQL's protocol, "SSL Session Encryption").
    static let sslRequestCode: Int32 = 80_877_103

    /// Starts TLS on a connected socket before the start-up message: asks
    /// the server (SSLRequest, `sslnegotiation=postgres`) or starts the
    /// handshake at once with ALPN `postgresql` (`direct`, PostgreSQL 17+),
    /// then checks what verify-full and direct require. False when the
    /// server said no and `settings` lets the connection go on in clear
    /// text (`prefer`); every other failure throws, with the reason.
    func startTLS(_ settings: TLSSettings, endpoint: PostgresURL.Endpoint, deadline: Double, limit: Double) throws -> Bool {
        let files = try settings.files()
        if settings.negotiation == .postgres {
            var request: [UInt8] = []
            request.appendInt32(8)
            request.appendInt32(Self.sslRequestCode)
            try send(request)
            guard try poll(timeout: max(deadline - monotonicSeconds(), 0)) else {
                throw PostgresClientError.timedOut("\(endpoint): no answer to the TLS request", seconds: limit)
            }
            // One byte and no more: bytes after the 'S' would be read as
            // TLS by OpenSSL, never as plain messages (CVE-2021-23222).
            var answer: UInt8 = 0
            var count = 0
            repeat { count = recv(descriptor, &answer, 1, 0) } while count < 0 && errno == EINTR
            guard count == 1 else {
                throw PostgresClientError.connectionFailed(
                    "\(endpoint): \(count == 0 ? "the server closed the connection" : Self.errorText(errno)) in answer to the TLS request")
            }
            switch answer {
            case UInt8(ascii: "S"):
                break
            case UInt8(ascii: "N"):
                guard settings.mode == .prefer || settings.mode == .allow else {
                    throw PostgresClientError.connectionFailed(
                        "\(endpoint): the server does not support SSL (TLS), but sslmode=\(settings.mode.rawValue) requires it")
                }
                return false
            case UInt8(ascii: "E"):
                throw PostgresClientError.connectionFailed("\(endpoint): the server answered the TLS request with an error (a server older than 7.2?)")
            default:
                throw PostgresClientError.protocolViolation("\(endpoint): the server answered the TLS request with byte \(answer), not S or N")
            }
        }
        let session: TLSSession
        do {
            session = try TLSSession.start(on: descriptor, files: files,
                                           serverName: TLSSession.isIPAddress(settings.host) ? nil : settings.host,
                                           timeout: deadline - monotonicSeconds())
        } catch let failure as TLSSession.HandshakeFailure {
            if failure.timedOut { throw PostgresClientError.timedOut("\(endpoint): \(failure.reason)", seconds: limit) }
            let hint = settings.negotiation == .direct && failure.closedByServer
                ? " (sslnegotiation=direct needs PostgreSQL 17 or later; sslnegotiation=postgres works with every server)" : ""
            throw PostgresClientError.connectionFailed("\(endpoint): \(failure.reason)\(hint)")
        }
        tls = session
        if settings.negotiation == .direct, !session.choseALPNPostgreSQL {
            throw PostgresClientError.connectionFailed("\(endpoint): the server did not choose ALPN protocol postgresql after a direct TLS start")
        }
        if settings.mode == .verifyFull, !session.certificateNames(host: settings.host) {
            throw PostgresClientError.connectionFailed(
                "\(endpoint): server certificate for \(session.certificateNames) does not match host name \"\(settings.host)\" (sslmode=verify-full)")
        }
        return true
    }
}
