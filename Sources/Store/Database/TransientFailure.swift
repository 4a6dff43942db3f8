import GRDB
import PostgresWire

/// Whether a failed write may land if it is simply sent again later: the
/// database was unreachable, restarting, locked or busy, not refusing the
/// write itself. What a runner retries until the database answers (README,
/// "Build runners": a runner outlives a restarted server), rather than
/// dropping a build's log lines or its end.
public enum TransientFailure {
    /// SQLite's interrupt (`Store.interrupt`, a Ctrl-C on the Lua thread),
    /// which reaches every connection of the store, not only the Lua's.
    public static func isInterrupt(_ error: any Error) -> Bool {
        (error as? DatabaseError)?.resultCode == .SQLITE_INTERRUPT
    }

    public static func matches(_ error: any Error) -> Bool {
        switch error {
        case let client as PostgresClientError:
            switch client {
            case .connectionFailed, .connectionClosed, .timedOut: return true
            case .invalidURL, .invalidConnectionString, .unsupported, .authentication, .protocolViolation: return false
            }
        case let server as PostgresError:
            // Class 08: connection exception; 57P01-03: the server shutting
            // down or starting; 53300: too many connections; 40001/40P01:
            // serialization failure and deadlock; 55P03: a lock not available.
            return server.code.hasPrefix("08") || ["57P01", "57P02", "57P03", "53300", "40001", "40P01", "55P03"].contains(server.code)
        case let store as PostgresStoreError:
            if case .connectTimedOut = store { return true }
            if case .locked = store { return true }
            return false
        case is WritesWereBlocked:
            return true
        case let store as StoreError:
            if case .diskFull = store { return true }
            if case .cannotOpen = store { return true }
            return false
        case let sqlite as DatabaseError:
            switch sqlite.resultCode {
            case .SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_INTERRUPT, .SQLITE_FULL, .SQLITE_IOERR, .SQLITE_CANTOPEN, .SQLITE_PROTOCOL:
                return true
            default:
                return false
            }
        default:
            return false
        }
    }
}

/// A take-back that waited for SQLite's write lock longer than half a
/// heartbeat: writes were blocked, so the holder's heartbeats were
/// too, and its lease is judged again once they are not (QueueRunner).
public struct WritesWereBlocked: Error, CustomStringConvertible {
    public var seconds: Double
    public var description: String {
        "the database took no writes for \(String(format: "%.1f", seconds)) s (a lock held elsewhere); the leases are judged again later"
    }
}
