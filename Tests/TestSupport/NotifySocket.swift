import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A datagram socket standing in for systemd's `$NOTIFY_SOCKET`: bound at a
/// path in `folder`, or (`abstract`) at a name in the abstract namespace,
/// written `@name` as systemd gives it. Reads what a `Type=notify` service
/// sends (`READY=1`, `WATCHDOG=1`, …), one datagram a message.
public final class NotifySocket: @unchecked Sendable {
    /// The value for `NOTIFY_SOCKET`.
    public let address: String
    private let descriptor: Int32
    private let path: String?
    /// Every message received so far, in order.
    public private(set) var received: [String] = []

    public init(in folder: String, abstract: Bool) throws {
        let name = "opsh-notify-\(getpid())-\(UUID().uuidString.prefix(8))"
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var bytes: [UInt8]
        if abstract {
            address = "@" + name
            path = nil
            bytes = [0] + Array(name.utf8)
        } else {
            address = folder + "/" + name
            path = address
            bytes = Array(address.utf8)
        }
        var socketAddress = sockaddr_un()
        socketAddress.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &socketAddress.sun_path) { $0.copyBytes(from: bytes) }
        let length = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count + (abstract ? 0 : 1)
        let bound = withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(length)) }
        }
        guard descriptor >= 0, bound == 0 else {
            throw ShellError(script: "bind \(address)", output: String(cString: strerror(errno)))
        }
    }

    deinit {
        close(descriptor)
        if let path { unlink(path) }
    }

    /// The next message, or nil when none came within `timeout` seconds.
    public func next(timeout: Double) -> String? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, Int32(max(0, timeout) * 1000))
        guard ready > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(descriptor, &buffer, buffer.count, 0)
        guard count >= 0 else { return nil }
        let message = String(decoding: buffer[..<count], as: UTF8.self)
        received.append(message)
        return message
    }

    /// Reads messages until one satisfies `condition` (it is returned), or
    /// nil after `timeout` seconds in all.
    public func waitFor(timeout: Double, _ condition: (String) -> Bool) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            guard let message = next(timeout: deadline.timeIntervalSinceNow) else { return nil }
            if condition(message) { return message }
        }
        return nil
    }
}
