import Foundation

/// A TCP server on 127.0.0.1 that accepts connections and never answers
/// (a remote that hangs): what `git ls-remote git://127.0.0.1:PORT/x`
/// waits on for ever. Closed with the object.
public final class SilentServer: @unchecked Sendable {
    public let port: UInt16
    private let listener: Int32
    private let lock = NSLock()
    private var accepted: [Int32] = []
    private var closed = false

    public init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw POSIXError(.EMFILE) }
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        Thread.detachNewThread { [weak self] in
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                guard let self else { close(connection); return }
                let keep = self.lock.withLock { () -> Bool in
                    if self.closed { return false }
                    self.accepted.append(connection)
                    return true
                }
                if !keep { close(connection); return }
            }
        }
    }

    /// How many connections it accepted so far.
    public var connectionCount: Int { lock.withLock { accepted.count } }

    deinit {
        lock.withLock {
            closed = true
            for connection in accepted { close(connection) }
        }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}

/// Processes of this machine, read from /proc.
public enum ProcessTable {
    /// The pids of live processes (not zombies) whose command line
    /// contains `text`.
    public static func pids(commandLineContaining text: String) -> [pid_t] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { pid_t($0) }.filter { pid in
            guard pid != getpid(), isAlive(pid),
                  let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
            let line = String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
            return line.contains(text)
        }
    }

    /// Whether `pid` runs (exists and is not a zombie).
    public static func isAlive(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        let state = stat[stat.index(close, offsetBy: 2)]
        return state != "Z" && state != "X"
    }
}
