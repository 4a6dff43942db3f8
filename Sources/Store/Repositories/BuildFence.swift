import Foundation

/// The lease a build's run writes under: the holder that claimed it and
/// the attempt its claim started (README, "Build runners": exactly once).
///
/// Every write a run makes for its build (log lines, progress, the
/// commit, the end) carries it, and the engine lands the write only while
/// the build's row still names that holder and that attempt, checked in
/// the write's own transaction (the row locked on PostgreSQL, the write
/// lock held on SQLite). A runner that was paused past three heartbeats,
/// whose build another runner took back and started again, so cannot
/// write into the new attempt's log or end it: its write throws
/// ``BuildLeaseLost`` and nothing of it lands.
public struct BuildFence: Sendable, Hashable, CustomStringConvertible {
    /// ``BuildHolder/id`` of the job manager that claimed the build.
    public var runnerId: String
    /// The build's `attempts` once this run's claim counted it.
    public var attempt: Int

    public init(runnerId: String, attempt: Int) {
        self.runnerId = runnerId
        self.attempt = attempt
    }

    public var description: String { "attempt \(attempt)" }

    /// Nil while `lease` (the build's row as the write's transaction reads
    /// it) is this fence's; the refusal otherwise. A take-back clears the
    /// holder (requeued or failed), a new claim sets another holder or
    /// counts another attempt: each ends this fence.
    func refusal(buildId: String, lease: BuildLease?, takenBackBy note: String?) -> BuildLeaseLost? {
        guard let lease else { return BuildLeaseLost(buildId: buildId, fence: self, now: nil, takeBackNote: note) }
        if lease.runnerId == runnerId && lease.attempts == attempt { return nil }
        return BuildLeaseLost(buildId: buildId, fence: self, now: lease, takeBackNote: note)
    }
}

/// A run's write refused because its build is no longer its own: taken
/// back (requeued or failed), claimed again, or deleted. Nothing of the
/// write landed; the run stops its build and writes nothing more.
public struct BuildLeaseLost: Error, Sendable, CustomStringConvertible {
    public var buildId: String
    public var fence: BuildFence
    /// The build's lease now; nil when the build was deleted.
    public var now: BuildLease?
    /// The take-back's line in the build's log (which runner took it back
    /// and why), when there is one.
    public var takeBackNote: String?

    /// `build b1 is no longer this run's (attempt 1): runner pid 42 on ci-2
    /// holds it now (attempt 2); taken back from …`.
    public var description: String {
        var text = "build \(buildId) is no longer this run's (\(fence)): "
        if let now {
            if let host = now.runnerHost, let pid = now.runnerPid, now.runnerId != nil, now.runnerId != fence.runnerId || now.attempts != fence.attempt,
               now.status == .running || now.status == .queued {
                text += "runner pid \(pid) on \(host) holds it now (\(now.status.rawValue), attempt \(now.attempts))"
            } else {
                text += "it is \(now.status.rawValue) now (attempt \(now.attempts))"
            }
        } else {
            text += "it was deleted"
        }
        if let takeBackNote { text += "; \(takeBackNote)" }
        return text
    }
}
