import GRDB
import GRDBSQLite

/// The session's writer connection as SQLite's row path (the `db` module's
/// `SQLiteRows`) takes it: SQLite's handle, on which the row path prepares
/// and steps statements itself, and the one write that goes through GRDB.
/// GRDB's `Database` stays inside Store (ARCHITECTURE.md, "The engine
/// seam, below the session").
public struct SQLiteWriterConnection {
    let db: Database

    /// SQLite's `sqlite3 *`.
    public var handle: OpaquePointer { db.sqliteConnection! }

    /// Runs the one statement `sql` through GRDB, so that the dry run's
    /// change counter sees its rows; `bind` binds its parameters on
    /// SQLite's `sqlite3_stmt *` (by the same rules as the row path's
    /// statements). SQLite's failure is an ``SQLFailure``.
    public func executeThroughGRDB(_ sql: String, bind: (OpaquePointer) throws -> Void) throws {
        do {
            let statement = try db.makeStatement(sql: sql)
            try statement.bindRaw(bind)
            try statement.execute()
        } catch let error as DatabaseError {
            throw SQLFailure(message: error.message ?? "\(error.resultCode)", sql: sql)
        }
    }
}

extension SessionDatabase {
    /// The writer connection while Lua code runs inside a transaction
    /// (`db.transaction`, a dry run, a scope that has written).
    public var transactionConnection: SQLiteWriterConnection? { current.map(SQLiteWriterConnection.init) }

    /// ``transactionConnection`` for a statement to run on, refused once
    /// SQLite itself ended that transaction (a trigger's `RAISE(ROLLBACK)`):
    /// stepped on the connection then, a write would commit on its own and
    /// stay whatever the transaction does next.
    public func liveTransactionConnection() throws -> SQLiteWriterConnection? {
        guard let current else { return nil }
        try refuseOnceSQLiteEndedTheTransaction(current)
        return SQLiteWriterConnection(db: current)
    }

    /// Runs a script of several statements without parameters, atomically
    /// (``write(_:)``). Each statement is checked by ``TransactionGuard``
    /// before it runs, so a `COMMIT` after a `DELETE` is refused before the
    /// delete runs (and the script's savepoint rolls back what ran before it).
    public func runScript(_ sql: String) throws {
        try write { db in
            do {
                let statements = try db.allStatements(sql: sql)
                while let statement = try statements.next() {
                    let effects = try TransactionGuard.check(statement.sqliteStatement, on: db.sqliteConnection!)
                    if sqlite3_stmt_readonly(statement.sqliteStatement) != 0 {
                        // Changes nothing, so GRDB's observers (watch) need
                        // not see it; and GRDB takes `EXPLAIN COMMIT` for a
                        // commit and traps.
                        try Self.stepToEnd(statement.sqliteStatement, on: db.sqliteConnection!)
                    } else {
                        try countingDroppedRows(of: effects, on: db.sqliteConnection!) { try statement.execute() }
                    }
                }
            } catch let error as DatabaseError {
                throw SQLFailure(message: error.message ?? "\(error.resultCode)", sql: error.sql ?? sql)
            }
        }
    }

    private static func stepToEnd(_ statement: OpaquePointer, on connection: OpaquePointer) throws {
        var code = sqlite3_step(statement)
        while code == SQLITE_ROW { code = sqlite3_step(statement) }
        sqlite3_reset(statement)
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)),
                                sql: sqlite3_sql(statement).map { String(cString: $0) })
        }
    }
}
