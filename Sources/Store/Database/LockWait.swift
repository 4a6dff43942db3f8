import Foundation
import GRDBSQLite
import Synchronization

/// How opsh's connections wait for a lock another connection holds
/// (SQLite's busy handler): as SQLite's own busy timeout, retrying with
/// growing sleeps until ``timeout`` has passed, except that a wait gives up
/// as soon as it is abandoned.
///
/// Why not `sqlite3_busy_timeout`: `sqlite3_interrupt` does not reach a
/// statement that waits for a lock, so Ctrl-C, `--timeout` or SIGTERM on a
/// script stuck behind another process's write transaction sat out the
/// whole busy timeout (`--busy-timeout 600`: ten minutes) before anything
/// happened.
public final class LockWait: Sendable {
    /// How long one statement waits for a lock before it fails with
    /// "database is locked".
    public let timeout: TimeInterval
    private let abandonment = Mutex<(@Sendable () -> Bool)?>(nil)
    private let cap = Mutex<TimeInterval?>(nil)

    /// Runs `body` with lock waits shortened to at most `seconds` (the
    /// audit row of a run that changed nothing: a read must not stall
    /// behind the backend's writers for the whole busy timeout).
    public func capped<T>(at seconds: TimeInterval, _ body: () throws -> T) rethrows -> T {
        cap.withLock { $0 = seconds }
        defer { cap.withLock { $0 = nil } }
        return try body()
    }

    private let announcement = Mutex<(after: TimeInterval, say: @Sendable (TimeInterval) -> Void)?>(nil)

    /// Calls `say` with the time waited so far once a wait has lasted
    /// `seconds` (once per wait).
    public func announce(after seconds: TimeInterval, _ say: @escaping @Sendable (TimeInterval) -> Void) {
        announcement.withLock { $0 = (seconds, say) }
    }

    public init(timeout: TimeInterval) {
        self.timeout = timeout
    }

    /// Lock waits give up (the statement fails with SQLITE_BUSY) whenever
    /// `condition` holds: for the Lua session, while its chunk is being
    /// interrupted.
    public func abandon(when condition: @escaping @Sendable () -> Bool) {
        abandonment.withLock { $0 = condition }
    }

    /// Whether waits give up now.
    public var isAbandoned: Bool {
        abandonment.withLock { $0 }?() ?? false
    }

    /// Makes a connection opened with SQLite's C API wait for locks
    /// through this object, which must outlive the connection.
    public func install(on handle: OpaquePointer) {
        sqlite3_busy_handler(handle, { context, tries in
            Unmanaged<LockWait>.fromOpaque(context!).takeUnretainedValue().retry(afterTries: Int(tries)) ? 1 : 0
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// SQLite's busy handler: whether to try again after `tries` failed
    /// attempts, having slept before the next one. The sleeps are SQLite's
    /// own (1, 2, 5 … 100 ms), so a wait is as responsive as with
    /// `sqlite3_busy_timeout`, and an abandoned one stops within 100 ms.
    public func retry(afterTries tries: Int) -> Bool {
        if isAbandoned { return false }
        let (delay, prior) = Self.delay(afterTries: tries)
        // Within a year: a larger --busy-timeout would overflow Int.
        let limit = Int(min(max(min(timeout, cap.withLock { $0 } ?? timeout), 0), 31_536_000) * 1000)
        let sleep = min(delay, limit - prior)
        guard sleep > 0 else { return false }
        usleep(UInt32(sleep) * 1000)
        if let (after, say) = announcement.withLock({ $0 }) {
            // The sleep that crossed `after` (each wait counts from 0 again).
            let waited = prior + sleep
            if waited >= Int(after * 1000), prior < Int(after * 1000) { say(Double(waited) / 1000) }
        }
        return !isAbandoned
    }

    /// The sleep before the next attempt and the time slept before it, in
    /// milliseconds (`sqliteDefaultBusyCallback`).
    static func delay(afterTries tries: Int) -> (delay: Int, prior: Int) {
        let delays = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100]
        let totals = [0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228]
        if tries < delays.count { return (delays[tries], totals[tries]) }
        let last = delays.count - 1
        return (delays[last], totals[last] + delays[last] * (tries - last))
    }
}

/// What the shell says while a statement waits for a lock, on either engine.
public enum LockWaitNotice {
    /// "waiting 1.0 s so far for a lock held by sqlite3 (pid 30546,
    /// writing); gives up after 5 s (--busy-timeout); Ctrl-C stops waiting".
    public static func sentence(holders: String, waited: TimeInterval, timeout: TimeInterval?) -> String {
        let limit = timeout.map { "; gives up after \(String(format: "%g", $0)) s (--busy-timeout)" } ?? ""
        return "waiting \(String(format: "%.1f", waited)) s so far for a lock \(holders)\(limit); Ctrl-C stops waiting"
    }
}
