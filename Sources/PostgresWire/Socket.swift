import Glibc

/// A blocking stream socket to the server: a Unix-domain socket or TCP,
/// in clear text or, once ``startTLS(_:endpoint:deadline:limit:)`` ran,
/// through its ``TLSSession`` (the same calls either way).
///
/// Blocking on purpose: opsh runs its queries from one thread (the Lua
/// thread), and a query is one write and reads until the server's
/// ReadyForQuery; an event loop would add a thread hop per query and buy
/// nothing. Only `connect` has a deadline (the URL's `connect_timeout`);
/// a query that runs long is stopped by a CancelRequest on another
/// connection (``PostgresCanceller``), as psql's Ctrl-C does.
///
/// Every call is retried on EINTR, so a signal handler (Ctrl-C) does not
/// turn into a broken connection. Writes use MSG_NOSIGNAL: a server that
/// went away is an error, not a SIGPIPE that kills the process.
final class Socket {
    private(set) var descriptor: Int32
    /// The TLS session every byte goes through, once started.
    var tls: TLSSession?

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// A socket over a stream opened elsewhere, which it owns from now on.
    static func adopting(_ descriptor: Int32) -> Socket {
        Socket(descriptor: descriptor)
    }

    deinit { close() }

    func close() {
        tls?.close()
        tls = nil
        if descriptor >= 0 {
            _ = Glibc.close(descriptor)
            descriptor = -1
        }
    }

    /// Connects to `endpoint` within `timeout` seconds.
    static func connect(to endpoint: PostgresURL.Endpoint, timeout: Double) throws -> Socket {
        switch endpoint {
        case .unixSocket(let path):
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8)
            let capacity = MemoryLayout.size(ofValue: address.sun_path)
            guard bytes.count < capacity else {
                throw PostgresClientError.connectionFailed("the socket path \(path) is longer than \(capacity - 1) bytes")
            }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                raw.copyBytes(from: bytes)
                raw[bytes.count] = 0
            }
            let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard descriptor >= 0 else { throw PostgresClientError.connectionFailed("socket(): \(errorText(errno))") }
            let socket = Socket(descriptor: descriptor)
            try withUnsafePointer(to: &address) { pointer in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    try socket.connect($0, length: socklen_t(MemoryLayout<sockaddr_un>.size), timeout: timeout, describing: "\(path)")
                }
            }
            return socket

        case .tcp(let host, let port):
            var hints = addrinfo()
            hints.ai_family = AF_UNSPEC
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            hints.ai_flags = AI_ADDRCONFIG
            var list: UnsafeMutablePointer<addrinfo>? = nil
            let status = getaddrinfo(host, String(port), &hints, &list)
            guard status == 0, let first = list else {
                throw PostgresClientError.connectionFailed("cannot resolve host \(host): \(String(cString: gai_strerror(status)))")
            }
            defer { freeaddrinfo(list) }
            var failures: [String] = []
            var timedOut = 0
            var entry: UnsafeMutablePointer<addrinfo>? = first
            while let current = entry {
                entry = current.pointee.ai_next
                let descriptor = Glibc.socket(current.pointee.ai_family, current.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), current.pointee.ai_protocol)
                guard descriptor >= 0 else { continue }
                let socket = Socket(descriptor: descriptor)
                do {
                    try socket.connect(current.pointee.ai_addr, length: current.pointee.ai_addrlen, timeout: timeout,
                                       describing: PostgresURL.Endpoint.tcp(host: host, port: port).description)
                    // Each query is one small write answered by the server:
                    // Nagle's delay would add up to 40 ms to each.
                    var one: Int32 = 1
                    setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                    setsockopt(descriptor, SOL_SOCKET, SO_KEEPALIVE, &one, socklen_t(MemoryLayout<Int32>.size))
                    return socket
                } catch PostgresClientError.connectionFailed(let reason) {
                    failures.append(reason)
                } catch PostgresClientError.timedOut(let reason, _) {
                    failures.append(reason)
                    timedOut += 1
                }
            }
            if timedOut > 0, timedOut == failures.count {
                throw PostgresClientError.timedOut(failures.joined(separator: "; "), seconds: timeout)
            }
            throw PostgresClientError.connectionFailed(failures.isEmpty ? "no address for \(host)" : failures.joined(separator: "; "))
        }
    }

    /// A non-blocking connect and poll(2) for the deadline, then back to
    /// blocking.
    private func connect(_ address: UnsafePointer<sockaddr>, length: socklen_t, timeout: Double, describing target: String) throws {
        let flags = fcntl(descriptor, F_GETFL)
        _ = fcntl(descriptor, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(descriptor, F_SETFL, flags) }
        if Glibc.connect(descriptor, address, length) == 0 { return }
        let code = errno
        guard code == EINPROGRESS || code == EINTR || code == EAGAIN else {
            throw PostgresClientError.connectionFailed("\(target): \(Self.errorText(code))")
        }
        switch try poll(events: Int16(POLLOUT), timeout: timeout) {
        case false:
            throw PostgresClientError.timedOut("\(target): no answer", seconds: timeout)
        case true:
            var error: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(descriptor, SOL_SOCKET, SO_ERROR, &error, &size)
            guard error == 0 else { throw PostgresClientError.connectionFailed("\(target): \(Self.errorText(error))") }
        }
    }

    /// Writes every byte, or throws.
    func send(_ bytes: [UInt8]) throws {
        guard descriptor >= 0 else { throw PostgresClientError.connectionClosed("the socket is closed") }
        if let tls { return try tls.write(bytes) }
        var sent = 0
        try bytes.withUnsafeBytes { raw in
            while sent < raw.count {
                let count = Glibc.send(descriptor, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                if count < 0 {
                    if errno == EINTR { continue }
                    throw PostgresClientError.connectionClosed("writing to the server: \(Self.errorText(errno))")
                }
                sent += count
            }
        }
    }

    /// Reads what is available (blocking until something is) into
    /// `buffer`: the count read, at least 1. Throws when the server closed
    /// the connection.
    func receive(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard descriptor >= 0 else { throw PostgresClientError.connectionClosed("the socket is closed") }
        if let tls { return try tls.read(into: buffer) }
        while true {
            let count = Glibc.recv(descriptor, buffer.baseAddress!, buffer.count, 0)
            if count > 0 { return count }
            if count < 0, errno == EINTR { continue }
            throw PostgresClientError.connectionClosed(count == 0 ? PostgresConnection.closedByPeer : Self.errorText(errno))
        }
    }

    /// Waits until the socket is readable (or writable, per `events`) or
    /// `timeout` seconds passed (negative: forever). True when ready.
    func poll(events: Int16 = Int16(POLLIN), timeout: Double) throws -> Bool {
        // Under TLS, readable means decrypted data is there (COpenSSL
        // looks past records that carry none).
        if let tls, events == Int16(POLLIN) { return try tls.waitReadable(timeout: timeout) }
        let deadline = timeout < 0 ? nil : monotonicSeconds() + timeout
        while true {
            var entry = pollfd(fd: descriptor, events: events, revents: 0)
            var milliseconds: Int32 = -1
            if let deadline {
                let left = deadline - monotonicSeconds()
                milliseconds = left <= 0 ? 0 : Int32(min(left * 1000, Double(Int32.max)).rounded(.up))
            }
            let result = Glibc.poll(&entry, 1, milliseconds)
            if result < 0 {
                if errno == EINTR { continue }
                throw PostgresClientError.connectionClosed("poll: \(Self.errorText(errno))")
            }
            if result > 0 { return true }
            if let deadline, monotonicSeconds() >= deadline { return false }
        }
    }

    static func errorText(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}

/// Seconds on the monotonic clock.
func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

func formatSeconds(_ seconds: Double) -> String {
    seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
}
