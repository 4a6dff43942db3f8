import Foundation

/// Who runs a build: host, pid and the process's start time.
///
/// A pid alone is not enough: after a crash or a reboot the number can
/// belong to another process. The start time (from `/proc/PID/stat`)
/// tells the original runner from an impostor, so a build left `running`
/// by a dead opsh is detectable as stale.
public struct RunnerIdentity: Sendable, Hashable {
    public var host: String
    public var pid: Int
    /// Seconds since 1970 when the process started (to the clock tick).
    public var startedAt: Double

    /// This process.
    public static var current: RunnerIdentity {
        let pid = Int(getpid())
        return RunnerIdentity(host: hostName(), pid: pid, startedAt: processStartTime(pid: pid) ?? 0)
    }

    public init(host: String, pid: Int, startedAt: Double) {
        self.host = host
        self.pid = pid
        self.startedAt = startedAt
    }

    /// Whether this runner still exists: same host, a process with that pid
    /// started at the same time. A runner on another host is assumed alive
    /// (this machine cannot tell).
    public var isAlive: Bool {
        guard host == Self.hostName() else { return true }
        guard let started = Self.processStartTime(pid: pid) else { return false }
        // /proc start times have clock-tick resolution; allow a tick or two.
        return abs(started - startedAt) < 0.05
    }

    static func hostName() -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        buffer.withUnsafeMutableBufferPointer { pointer in
            pointer.withMemoryRebound(to: CChar.self) { _ = gethostname($0.baseAddress!, $0.count - 1) }
        }
        return String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// The start time of a process, or nil if there is none.
    public static func processStartTime(pid: Int) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after "(comm)": state is field 3; starttime is field 22.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // A zombie has ended (its parent has not reaped it yet).
        guard fields.count > 19, fields[0] != "Z", fields[0] != "X", let ticks = Double(fields[19]) else { return nil }
        return bootTime + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Boot time in seconds since 1970, from /proc/stat.
    static let bootTime: Double = {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return 0 }
        for line in stat.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) ?? 0
        }
        return 0
    }()
}
