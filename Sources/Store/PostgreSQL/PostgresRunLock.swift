import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PostgresWire

/// `opsh run`'s lock on a PostgreSQL database (docs/operations.md, `--lock`): a
/// session-level advisory lock on the server, held by a connection of its
/// own for the run's life. The server scopes advisory locks to the
/// database, so every URL of one database (socket or TCP, another user,
/// another spelling) and every host share it; the server releases it when
/// the connection ends, also when the process is killed.
///
/// The key is the two-integer form, `(opsh's class, the script's
/// identity)`: a lock space of its own, apart from the one-bigint keys
/// applications (and opsh's migrations) use.
public final class PostgresRunLock {
    /// 'opsh' in ASCII: the class of every run lock.
    public static let lockClass: Int32 = 0x6F70_7368

    public enum Outcome {
        case acquired(PostgresRunLock)
        /// Another run holds it; who, when the server says ("pid 123 on
        /// ci-1, since 2026-05-04 02:00:03 UTC").
        case held(holder: String?)
    }

    private let connection: PostgresConnection

    private init(connection: PostgresConnection) {
        self.connection = connection
    }

    deinit { connection.close() }

    /// Takes the lock of the run identified by `key` (the script's
    /// identity, hashed) on the database at `url`, without waiting. The
    /// connection says who holds it (its `application_name`) to the run
    /// that finds it taken.
    ///
    /// A holder that is an opsh process of this machine which has exited
    /// holds it only until the server notices its connection closed (a
    /// moment after the process is gone): the lock is tried again for up
    /// to two seconds then, so that a run right after another (cron, a
    /// dry run then the run) is not refused by the one that just ended.
    public static func acquire(url text: String, key: UInt64) throws -> Outcome {
        var url = try PostgresURL(text)
        url.applicationName = String("opsh pid \(getpid()) on \(hostName)".prefix(63))
        let connection = try PostgresConnection(url: url)
        let objectID = Int32(truncatingIfNeeded: key)
        let deadline = Date().addingTimeInterval(2)
        while true {
            let taken = try connection.query("SELECT pg_try_advisory_lock(\(lockClass), \(objectID))").scalar
            if taken == .bool(true) { return .acquired(PostgresRunLock(connection: connection)) }
            guard Date() < deadline, let gone = try? holderHasExited(connection, objectID: objectID), gone else { break }
            usleep(20_000)
        }
        defer { connection.close() }
        let holder = try? connection.query("""
            SELECT a.application_name, to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
            FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.classid = '\(UInt32(bitPattern: lockClass))'::oid AND l.objid = '\(UInt32(bitPattern: objectID))'::oid
            """).rows.first
        guard let holder, case let .text(name) = holder[0], name.hasPrefix("opsh ") else { return .held(holder: nil) }
        var text = String(name.dropFirst("opsh ".count))
        if case let .text(since) = holder[1] { text += ", since \(since) UTC" }
        return .held(holder: text)
    }

    /// Whether the lock's holder is an opsh process of this machine that
    /// no longer exists (its `application_name` names its pid and host).
    private static func holderHasExited(_ connection: PostgresConnection, objectID: Int32) throws -> Bool {
        let name = try connection.query("""
            SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.classid = '\(UInt32(bitPattern: lockClass))'::oid AND l.objid = '\(UInt32(bitPattern: objectID))'::oid
            """).scalar
        guard case let .text(text)? = name, text.hasPrefix("opsh pid "), text.hasSuffix(" on \(hostName)"),
              let pid = pid_t(text.dropFirst("opsh pid ".count).prefix { $0 != " " }) else { return false }
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    /// The database's URL for messages (its password left out).
    public static func label(of url: String) -> String {
        (try? PostgresURL(url).description) ?? url
    }

    /// This machine's name (gethostname: no name service asked).
    private static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "?" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
