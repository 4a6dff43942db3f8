import CSQLiteStore
import Foundation
import GRDBSQLite

/// The session's own read-only connection to the database file (the Lua
/// thread's reads outside a transaction).
///
/// Reads outside a transaction run here, on SQLite's C API with a cache of
/// prepared statements: no dispatch to a pool and no BEGIN/COMMIT around a
/// single statement. In WAL mode it sees every committed write, opsh's and
/// other processes'. `db.rows` streams from it, holding one snapshot for
/// the whole loop.
public final class ReadConnection {
    /// Used only inside ``lending(_:)`` (or by the C fast path, under the
    /// same lock) and for sqlite3_interrupt.
    private let handle: OpaquePointer

    /// Reads share one read transaction for at most this long. Beginning a
    /// read transaction in WAL mode costs file-lock system calls, which
    /// dominate a point query; a script's burst of reads shares one
    /// snapshot instead. It ends sooner when this session writes (so reads
    /// see its own writes) and whenever Lua goes idle, and by time (a
    /// watchdog thread in `CSQLBridge`): opsh never pins the WAL while it
    /// does something else.
    public static let snapshotWindow = 0.05
    /// The snapshot's state, in C: the `db` module's fast path uses it too.
    public let snapshot: UnsafeMutablePointer<opsh_sql_reader>

    /// Run once before the first statement (the store connects: the
    /// migration check must come before any read).
    private var beforeFirstUse: (() throws -> Void)?

    /// Waits for locks as the store's connections do; kept alive as long
    /// as the handle that calls it.
    private let lockWait: LockWait

    /// The page cache's size in KiB, set at the first use: 16 MiB, or a
    /// share of `--memory-limit` (``limitPageCache(toKiB:)``).
    private var pageCacheKiB = 16384

    /// Opens the file; nothing is read from it before ``ready()``.
    public init(path: String, lockWait: LockWait, beforeFirstUse: (() throws -> Void)? = nil) throws {
        var handle: OpaquePointer?
        // NOMUTEX: SQLite's connection mutex would be taken by every
        // sqlite3_column_* call of every row. The snapshot's watchdog thread,
        // which commits an expired read transaction, is kept apart by the
        // reader's own lock instead (``lending(_:)``, `opsh_reader.h`).
        // URI: on a read-only file system the store reads by an immutable=1 URI.
        let code = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close(handle)
            throw SQLFailure(message: "cannot open \(path) for reading: \(message)", sql: nil)
        }
        self.handle = handle
        self.beforeFirstUse = beforeFirstUse
        self.lockWait = lockWait
        lockWait.install(on: handle)
        opsh_stop_statements_on(handle)
        guard let reader = opsh_sql_reader_new(handle, Self.snapshotWindow) else {
            sqlite3_close(handle)
            throw SQLFailure(message: "cannot open \(path) for reading: out of memory", sql: nil)
        }
        snapshot = reader
    }

    /// Sets the connection up for reading: call it before preparing a
    /// statement on it (statements prepared afterwards are ready already).
    @inline(__always)
    public func ready() throws {
        if let beforeFirstUse { try setUp(beforeFirstUse) }
    }

    /// Runs `body`, which uses the handle (prepares, steps, reads columns,
    /// resets, finalizes, changes a setting), with the reader's lock held:
    /// the connection is NOMUTEX, and the snapshot's watchdog commits on it
    /// from its own thread. Nestable; `body` must not wait for long (the
    /// watchdog waits for it).
    @inline(__always)
    public func lending<T>(_ body: (OpaquePointer) throws -> T) rethrows -> T {
        opsh_sql_reader_enter(snapshot)
        defer { opsh_sql_reader_leave(snapshot) }
        return try body(handle)
    }

    private func setUp(_ before: () throws -> Void) throws {
        try before()
        beforeFirstUse = nil
        // Reports and repairs read the same tables again and again: a
        // 16 MiB page cache (SQLite's default is 2 MiB) keeps a working set
        // of a few hundred thousand rows in memory instead of re-reading
        // pages from the file for each query. (Not at open: the pragma
        // reads the schema.)
        applyPageCache()
    }

    /// Makes the page cache at most `kib` KiB, now or at the first use. It
    /// also bounds the memory a sort holds before it spills to a temporary
    /// file (SQLite sizes the sorter's by the cache).
    public func limitPageCache(toKiB kib: Int) {
        pageCacheKiB = min(pageCacheKiB, kib)
        if beforeFirstUse == nil { applyPageCache() }
    }

    private func applyPageCache() {
        lending { _ = sqlite3_exec($0, "PRAGMA cache_size = -\(pageCacheKiB)", nil, nil, nil) }
    }

    deinit {
        opsh_sql_reader_free(snapshot)
        TransactionGuard.unprotect(handle)
        sqlite3_close_v2(handle)
    }

    public static func prepare(_ sql: String, on handle: OpaquePointer) throws -> OpaquePointer {
        try prepareChecked(sql, on: handle).statement
    }

    /// ``prepare(_:on:)`` with what ``TransactionGuard`` found the
    /// statement does.
    public static func prepareChecked(_ sql: String, on handle: OpaquePointer) throws -> (statement: OpaquePointer, effects: StatementEffects) {
        // SQLite's prepare stops at a NUL: the rest would not run, unseen.
        if let reason = SQLText.refusal(sql) { throw StoreError.refused(reason: reason) }
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
            throw SQLFailure(message: SQLFailure.severalStatements, sql: sql)
        }
        guard code == SQLITE_OK else {
            throw SQLFailure(lastErrorOf: handle, sql: sql)
        }
        guard let statement else { throw SQLFailure(message: SQLFailure.noStatement, sql: sql) }
        do {
            return (statement, try TransactionGuard.check(statement, on: handle))
        } catch {
            sqlite3_finalize(statement)
            throw error
        }
    }

    public func interrupt() { sqlite3_interrupt(handle) }

    /// Called before each read outside a transaction: keeps the current
    /// snapshot while it is fresh, else starts a new one.
    public func useSnapshot(writeCount: Int) {
        opsh_sql_reader_use_snapshot(snapshot, writeCount)
    }

    /// Ends the shared read transaction; false while a `db.rows` loop
    /// still reads from it (it ends at the next chance).
    @discardableResult
    public func endSnapshot() -> Bool {
        opsh_sql_reader_end_snapshot(snapshot) != 0
    }
}

/// An SQL error: SQLite's message, the statement it is about and where in
/// it SQLite found the error.
public struct SQLFailure: Error, CustomStringConvertible {
    public var message: String
    public var sql: String?
    /// The byte of `sql` the error is at (`sqlite3_error_offset`, SQLite
    /// 3.38 and later), or nil.
    public var offset: Int?

    public init(message: String, sql: String?, offset: Int? = nil) {
        self.message = message
        self.sql = sql
        self.offset = offset
    }

    /// The failure of the last call on `handle` about `sql`, with the
    /// offset SQLite gives (-1: none).
    init(lastErrorOf handle: OpaquePointer, sql: String) {
        let offset = Int(sqlite3_error_offset(handle))
        self.init(message: String(cString: sqlite3_errmsg(handle)), sql: sql, offset: offset >= 0 ? offset : nil)
    }

    public static let severalStatements = "more than one statement (run scripts of several statements with db.exec and no parameters)"
    public var isSeveralStatements: Bool { message == Self.severalStatements }
    /// SQL with nothing to run in it (space, `;`, comments).
    public static let noStatement = "no statement in the SQL text"
    public var isNoStatement: Bool { message == Self.noStatement }

    public var description: String {
        guard let sql else { return "SQL error: \(message)" }
        let shown = sql.count > 200 ? String(sql.prefix(200)) + "…" : sql
        // Where, as PostgreSQL says it (its `position`): the character,
        // counted in code points from 1; the prompt draws a caret under it.
        if let offset, offset <= sql.utf8.count {
            let leading = sql.unicodeScalars.prefix { $0.properties.isWhitespace }.count
            let character = String(decoding: sql.utf8.prefix(offset), as: UTF8.self).unicodeScalars.count + 1 - leading
            return "SQL error: \(message) (at character \(character) of: \(shown.trimmingCharacters(in: .whitespacesAndNewlines)))"
        }
        return "SQL error: \(message) (in: \(shown.trimmingCharacters(in: .whitespacesAndNewlines)))"
    }
}
