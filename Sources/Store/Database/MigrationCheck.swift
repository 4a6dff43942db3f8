import GRDB
import GRDBSQLite

/// The migrations a database file has applied, read before opsh writes to
/// it, through one read-only connection of SQLite's C API.
///
/// Why not a GRDB queue: setting one up and closing it again was a fifth
/// of the time a one-liner's first query took (`opsh -e 'return
/// projects.count()'`), for two statements.
enum MigrationCheck {
    /// The identifiers recorded in `grdb_migrations`, oldest first; none
    /// when the table does not exist. Preparing the first statement reads
    /// the whole schema, which detects a damaged first page.
    ///
    /// - parameter openName: a path or a `file:` URI.
    /// - throws: `DatabaseError` with SQLite's code and message.
    static func appliedIdentifiers(openName: String, lockWait: LockWait) throws -> [String] {
        try inspect(openName: openName, lockWait: lockWait).applied
    }

    /// The applied migrations, and whether the database holds any table at
    /// all (an empty database is one opsh may make its own).
    static func inspect(openName: String, lockWait: LockWait) throws -> (applied: [String], isEmpty: Bool) {
        var handle: OpaquePointer?
        let code = sqlite3_open_v2(openName, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, nil)
        defer { sqlite3_close_v2(handle) }
        guard code == SQLITE_OK, let handle else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code),
                                message: handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code)))
        }
        lockWait.install(on: handle)
        let tables = try strings(handle, "SELECT name FROM sqlite_master WHERE type = 'table'")
        // Empty: no table but, maybe, the migrations table another opsh
        // process has just made while creating this database.
        let isEmpty = tables.allSatisfy { $0 == "grdb_migrations" }
        guard tables.contains("grdb_migrations") else { return ([], isEmpty) }
        let applied = try strings(handle, "SELECT identifier FROM grdb_migrations ORDER BY rowid")
        return (applied, isEmpty && applied.isEmpty)
    }

    /// The first column of every row of `sql`.
    private static func strings(_ handle: OpaquePointer, _ sql: String) throws -> [String] {
        var statement: OpaquePointer?
        var code = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
        defer { sqlite3_finalize(statement) }
        var values: [String] = []
        while code == SQLITE_OK || code == SQLITE_ROW {
            code = sqlite3_step(statement)
            if code == SQLITE_ROW, let text = sqlite3_column_text(statement, 0) {
                values.append(String(cString: text))
            }
        }
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(handle)), sql: sql)
        }
        return values
    }
}
