import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// systemd's notification protocol (`sd_notify`), without libsystemd:
/// each state is one datagram (`READY=1`, `WATCHDOG=1`, `STOPPING=1`,
/// `STATUS=…`) to the Unix socket named by `$NOTIFY_SOCKET`, a path or,
/// with a leading `@`, a name in the abstract namespace. What `opsh runner`
/// tells a `Type=notify` unit (docs/runners.md, "Under systemd"). Nil
/// where the variable is unset or names no usable socket (not under such
/// a unit).
public struct ServiceManagerNotifier: Sendable {
    /// `$NOTIFY_SOCKET` as given.
    public let socket: String
    /// The address's `sun_path` bytes (an abstract name's `@` as NUL).
    private let path: [UInt8]
    /// `WatchdogSec=`, when systemd watches this process: `$WATCHDOG_USEC`
    /// (for this pid, `$WATCHDOG_PID`), in seconds.
    public let watchdogInterval: Double?

    public init?(environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let socket = environment["NOTIFY_SOCKET"], let first = socket.first, first == "/" || first == "@" else { return nil }
        var path = Array(socket.utf8)
        if first == "@" { path[0] = 0 }
        guard path.count < MemoryLayout.size(ofValue: sockaddr_un().sun_path) else { return nil }
        self.socket = socket
        self.path = path
        let forThisProcess = environment["WATCHDOG_PID"].map { Int32($0) == getpid() } ?? true
        watchdogInterval = forThisProcess ? environment["WATCHDOG_USEC"].flatMap(Double.init).map { $0 / 1_000_000 } : nil
    }

    /// Sends `state` (`KEY=value` lines) in one datagram; false when it
    /// could not be sent (the reason in `errno`).
    @discardableResult
    public func send(_ state: String) -> Bool {
        let descriptor = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { bytes in
            bytes.copyBytes(from: path)
        }
        // A path's length counts its NUL; an abstract name's is its bytes.
        let length = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + path.count + (path.first == 0 ? 0 : 1)
        let bytes = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                sendto(descriptor, bytes, bytes.count, Int32(MSG_NOSIGNAL), socketAddress, socklen_t(length))
            }
        }
        return sent == bytes.count
    }
}
