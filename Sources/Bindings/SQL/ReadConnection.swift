import Foundation
import GRDBSQLite

/// The Lua thread's own read-only connection to the database file.
///
/// Reads outside a transaction run here, on SQLite's C API with a cache of
/// prepared statements: no dispatch to a pool and no BEGIN/COMMIT around a
/// single statement. In WAL mode it sees every committed write, opsh's and
/// other processes'. `db.rows` streams from it, holding one snapshot for
/// the whole loop.
final class ReadConnection {
    let handle: OpaquePointer
    private var cache: [String: OpaquePointer] = [:]

    init(path: String, busyTimeout: TimeInterval) throws {
        var handle: OpaquePointer?
        let code = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close(handle)
            throw SQLFailure(message: "cannot open \(path) for reading: \(message)", sql: nil)
        }
        self.handle = handle
        sqlite3_busy_timeout(handle, Int32(busyTimeout * 1000))
    }

    deinit {
        for statement in cache.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    /// A cached statement, reset and ready to bind.
    func cachedStatement(_ sql: String) throws -> OpaquePointer {
        if let statement = cache[sql] { return statement }
        let statement = try prepare(sql)
        cache[sql] = statement
        return statement
    }

    /// A new statement the caller finalizes (for cursors that outlive a
    /// call and may nest).
    func prepare(_ sql: String) throws -> OpaquePointer {
        try Self.prepare(sql, on: handle)
    }

    static func prepare(_ sql: String, on handle: OpaquePointer) throws -> OpaquePointer {
        var statement: OpaquePointer?
        var tail: UnsafePointer<CChar>?
        let code = sql.withCString { text in
            let result = sqlite3_prepare_v3(handle, text, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, &tail)
            if result == SQLITE_OK, let tail, !String(cString: tail).allSatisfy({ $0.isWhitespace || $0 == ";" }) {
                return SQLITE_MISUSE
            }
            return result
        }
        if code == SQLITE_MISUSE {
            sqlite3_finalize(statement)
            throw SQLFailure(message: "more than one statement (run scripts of several statements with db.exec and no parameters)", sql: sql)
        }
        guard code == SQLITE_OK, let statement else {
            throw SQLFailure(message: String(cString: sqlite3_errmsg(handle)), sql: sql)
        }
        return statement
    }

    func interrupt() { sqlite3_interrupt(handle) }
}

/// An SQL error: SQLite's message and the statement it is about.
struct SQLFailure: Error, CustomStringConvertible {
    var message: String
    var sql: String?

    var description: String {
        guard let sql else { return "SQL error: \(message)" }
        let shown = sql.count > 200 ? String(sql.prefix(200)) + "…" : sql
        return "SQL error: \(message) (in: \(shown.trimmingCharacters(in: .whitespacesAndNewlines)))"
    }
}
