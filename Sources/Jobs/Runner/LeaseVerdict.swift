import Foundation
import Store

/// Whether a running build's holder is gone, and the words that say why
/// for its log line.
///
/// The heartbeat decides everywhere: a build whose holder missed three
/// heartbeats is stale on any machine. On the holder's own host a process
/// that is gone (its pid free, or now another process's) is stale at once:
/// the operator's tools (`jobs.stale()`, `jobs.markStale`) use that hint,
/// the runners' automatic take-back does not (ARCHITECTURE.md, "Build
/// runners and the queue": containers may share a host name but not a
/// pid namespace).
struct LeaseVerdict {
    let lease: BuildLease
    let now: Date

    var heartbeatLapsed: Bool { lease.heartbeatLapsed(at: now) }

    /// The holder's process on this host is gone; nil when this host
    /// cannot tell (another host, or no runner recorded).
    var processGone: Bool? {
        guard let identity else { return nil }
        guard identity.host == RunnerIdentity.hostName() else { return nil }
        return !identity.isAlive
    }

    /// Stale for the operator's tools: the heartbeat lapsed, or the
    /// process is gone on this host.
    var isStale: Bool { heartbeatLapsed || processGone == true }

    var identity: RunnerIdentity? {
        guard let host = lease.runnerHost, let pid = lease.runnerPid, let started = lease.runnerStartedAt else { return nil }
        return RunnerIdentity(host: host, pid: pid, startedAt: started)
    }

    /// `runner pid 42 on ci-3 is gone` / `runner pid 42 on ci-3 (started
    /// 10:00:01 UTC): no heartbeat since 10:02:13 UTC (31.2 s ago; it beats
    /// every 10 s, stale after 3)`.
    var description: String {
        guard let identity else { return "no runner recorded" }
        var text = "runner pid \(identity.pid) on \(identity.host)"
        if let heartbeatAt = lease.heartbeatAt, let interval = lease.heartbeatInterval {
            text += " (started \(Self.time(identity.startedAt))): "
            text += heartbeatLapsed
                ? "no heartbeat since \(Self.time(heartbeatAt))"
                : "last heartbeat \(Self.time(heartbeatAt))"
            text += " (\(Self.seconds(now.timeIntervalSince1970 - heartbeatAt)) ago; it beats every \(Self.seconds(interval)), stale after \(Int(BuildLease.missedHeartbeats)))"
            if let gone = processGone { text += gone ? ", and its process is gone" : ", and its process still runs" }
        } else if let gone = processGone {
            text += gone ? " is gone" : " (still alive)"
        } else {
            text += " (another host; no heartbeat recorded)"
        }
        return text
    }

    static func time(_ seconds: Double) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "HH:mm:ss"
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: Date(timeIntervalSince1970: seconds)) + " UTC"
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : String(format: "%.1f s", value)
    }
}
