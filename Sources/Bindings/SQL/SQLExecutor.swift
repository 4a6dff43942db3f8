import CLuaShim
import CSQLBridge
import Foundation
import GRDB
import GRDBSQLite
import LuaRuntime
import Store

/// Runs SQL for Lua: picks the connection (the read connection, the
/// writer, or the open transaction's), binds the call's arguments, steps,
/// and pushes results. The `db` module is a thin layer over it.
final class SQLExecutor {
    let session: SessionDatabase
    let readConnection: ReadConnection?
    let markers: SQLMarkers
    let rowShapes: RowShapes
    let statements: StatementCache
    /// What the C fast path reads: the session's route (where statements
    /// run) and the statement cache.
    var route: UnsafeMutablePointer<opsh_sql_route> { statements.route }

    init(session: SessionDatabase, readConnection: ReadConnection?, markers: SQLMarkers, rowShapes: RowShapes) {
        self.session = session
        self.readConnection = readConnection
        self.markers = markers
        self.rowShapes = rowShapes
        statements = StatementCache(session: session.route)
        session.route.pointee.reader = readConnection?.snapshot
        route.pointee.failure_text = { state, message, sql in
            let failure = SQLFailure(message: message.map { String(cString: $0) } ?? "unknown error",
                                     sql: sql.map { String(cString: $0) })
            LuaStack(state!).push(failure.description)
        }
    }

    /// Runs the SQL string at argument 1 with the arguments from 2 on and
    /// pushes the result. SQL with no statement in it (space, `;`,
    /// comments) is nothing to do, as sqlite3 and psql take it.
    func run(call: LuaCall, shape: ResultShape) throws -> Int32 {
        guard lua_type(call.state, 1) == LUA_TSTRING else { throw call.typeError(1, expected: "string") }
        do {
            return try runStatement(call: call, shape: shape)
        } catch let failure as SQLFailure where failure.isNoStatement {
            return try nothingToDo(call: call, shape: shape, sql: failure.sql ?? "")
        }
    }

    /// What a statement that returns nothing gives; values given for it
    /// are refused (they have no placeholder).
    private func nothingToDo(call: LuaCall, shape: ResultShape, sql: String) throws -> Int32 {
        let given = max(0, call.argumentCount - 1)
        guard given == 0 else { throw PlaceholderMismatch.count(placeholders: 0, given: Int(given), hint: nil, sql: sql) }
        switch shape {
        case .changes: return call.results(.integer(0))
        case .value, .first: return call.results(nil)
        case .rows, .column:
            lua_createtable(call.state, 0, 0)
            return 1
        }
    }

    private func runStatement(call: LuaCall, shape: ResultShape) throws -> Int32 {
        statements.releaseShapes(in: call.state)
        if let current = session.current {
            let results = try run(on: current, call: call, shape: shape)
            try session.afterWrite()  // --max-changes stops a runaway loop at once
            return results
        }
        if let readConnection {
            do {
                let entry = try statements.statement(for: call.state, at: 1, on: readConnection.ready())
                if entry.isReadonly {
                    readConnection.useSnapshot(writeCount: session.writeCount)
                    return try step(entry, connection: readConnection.handle, call: call, shape: shape)
                }
            } catch let failure as SQLFailure where ["no such table", "no such trigger", "no such view", "no such index"]
                        .contains(where: failure.message.hasPrefix) {
                // A TEMP table (trigger, view, index) lives on the
                // connection that made it, the writer's: the statement runs
                // there (below), or fails there with the same message.
            }
        }
        return try session.writeStatement { db in
            try run(on: db, call: call, shape: shape)
        }
    }

    private func run(on db: Database, call: LuaCall, shape: ResultShape) throws -> Int32 {
        let connection = db.sqliteConnection!
        let entry = try statements.statement(for: call.state, at: 1, on: connection)
        // A dropped table's rows are counted as deleted (no row change
        // reports them).
        return try session.countingDroppedRows(of: entry.effects, on: connection) {
            try run(entry, on: db, call: call, shape: shape)
        }
    }

    private func run(_ entry: StatementCache.Entry, on db: Database, call: LuaCall, shape: ResultShape) throws -> Int32 {
        let connection = db.sqliteConnection!
        if session.isCountingChanges && !entry.isReadonly {
            // Through GRDB, so the dry run's change counter sees the rows;
            // bound by the same rules as the C path (text with its length).
            let sql = entry.sql
            do {
                let statement = try db.makeStatement(sql: sql)
                try statement.bindRaw { try StatementBridge.bind($0, call: call, from: 2, markers: markers, copy: true) }
                try statement.execute()
            } catch let error as DatabaseError {
                throw SQLFailure(message: error.message ?? "\(error.resultCode)", sql: sql)
            }
            return pushChanges(connection, call: call)
        }
        if !entry.isReadonly {
            // GRDB's observers (watch) do not see this step: told at commit.
            // The rows are counted by the connection's preupdate hook.
            session.changedOutsideGRDB = true
            return try step(entry, connection: connection, call: call, shape: shape)
        }
        return try step(entry, connection: connection, call: call, shape: shape)
    }

    /// Binds, steps to the end (or the first row), pushes, resets.
    private func step(_ entry: StatementCache.Entry, connection: OpaquePointer, call: LuaCall,
                      shape: ResultShape) throws -> Int32 {
        let state = call.state
        let statement = entry.statement
        defer {
            // Bound strings point into the Lua stack: drop them with the reset.
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        try StatementBridge.bind(statement, call: call, from: 2, markers: markers)
        switch shape {
        case .changes:
            var code = sqlite3_step(statement)
            while code == SQLITE_ROW { code = sqlite3_step(statement) }
            guard code == SQLITE_DONE else { throw failure(connection, entry) }
            return pushChanges(connection, call: call)
        case .value:
            let code = sqlite3_step(statement)
            if code == SQLITE_ROW, sqlite3_column_count(statement) > 0 {
                opsh_sql_push_column(state, statement, 0)
                return 1
            }
            guard code == SQLITE_DONE || code == SQLITE_ROW else { throw failure(connection, entry) }
            lua_pushnil(state)
            return 1
        case .first:
            let code = sqlite3_step(statement)
            if code == SQLITE_ROW {
                let shapeIndex = rowShapes.push(for: entry, state: state)
                opsh_sql_push_row(state, statement, sqlite3_column_count(statement), shapeIndex, shapeIndex + 1)
                return 1
            }
            guard code == SQLITE_DONE else { throw failure(connection, entry) }
            lua_pushnil(state)
            return 1
        case .column:
            let base = lua_gettop(state)
            lua_createtable(state, 0, 0)
            var count: lua_Integer = 0
            var code = sqlite3_step(statement)
            while code == SQLITE_ROW, sqlite3_column_count(statement) > 0 {
                opsh_sql_push_column(state, statement, 0)
                count += 1
                lua_rawseti(state, -2, count)
                try RowsMemoryLimit.check(state, base: base, rows: Int(count))
                code = sqlite3_step(statement)
            }
            guard code == SQLITE_DONE || code == SQLITE_ROW else { throw failure(connection, entry) }
            return 1
        case .rows:
            let base = lua_gettop(state)
            let shapeIndex = rowShapes.push(for: entry, state: state)
            let columnCount = sqlite3_column_count(statement)
            lua_createtable(state, 0, 0)
            var count: lua_Integer = 0
            var code = sqlite3_step(statement)
            while code == SQLITE_ROW {
                opsh_sql_push_row(state, statement, columnCount, shapeIndex, shapeIndex + 1)
                count += 1
                lua_rawseti(state, -2, count)
                try RowsMemoryLimit.check(state, base: base, rows: Int(count))
                code = sqlite3_step(statement)
            }
            guard code == SQLITE_DONE else { throw failure(connection, entry) }
            lua_pushvalue(state, shapeIndex + 2)
            lua_setmetatable(state, -2)
            return 1
        }
    }

    private func pushChanges(_ connection: OpaquePointer, call: LuaCall) -> Int32 {
        lua_pushinteger(call.state, sqlite3_changes64(connection))
        lua_pushinteger(call.state, sqlite3_last_insert_rowid(connection))
        return 2
    }

    private func failure(_ connection: OpaquePointer, _ entry: StatementCache.Entry) -> SQLFailure {
        SQLFailure(message: String(cString: sqlite3_errmsg(connection)), sql: entry.sql)
    }

    /// Runs a script of several statements without parameters.
    /// Each statement is checked by ``TransactionGuard`` before it runs,
    /// so a `COMMIT` after a `DELETE` is refused before the delete runs
    /// (and the script's savepoint rolls back what ran before it).
    func runScript(_ sql: String) throws {
        try session.write { db in
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
                        try session.countingDroppedRows(of: effects, on: db.sqliteConnection!) { try statement.execute() }
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

    // MARK: Cursors

    /// Opens a cursor for `db.rows`: a statement of its own, on the open
    /// transaction's connection or the read connection.
    func openCursor(_ sql: String, call: LuaCall, from first: Int32) throws -> SQLCursor {
        let handle: OpaquePointer
        if let current = session.current {
            handle = current.sqliteConnection!
        } else if let readConnection {
            handle = try readConnection.ready()
            readConnection.useSnapshot(writeCount: session.writeCount)
        } else {
            throw LuaCallError.message("db.rows needs a database file or an open transaction")
        }
        let statement: OpaquePointer
        do {
            statement = try ReadConnection.prepare(sql, on: handle)
        } catch let failure as SQLFailure where failure.isNoStatement {
            // Nothing to do: a loop over no rows.
            let given = max(0, call.argumentCount - first + 1)
            guard given == 0 else { throw PlaceholderMismatch.count(placeholders: 0, given: Int(given), hint: nil, sql: sql) }
            return SQLCursor(statement: nil, shapeSlot: rowShapes.slot(columns: [], key: "", state: call.state))
        }
        guard sqlite3_stmt_readonly(statement) != 0 else {
            sqlite3_finalize(statement)
            throw SQLFailure(message: "db.rows only reads; run changes with db.exec", sql: sql)
        }
        do {
            try StatementBridge.bind(statement, call: call, from: first, markers: markers, copy: true)
        } catch {
            sqlite3_finalize(statement)
            throw error
        }
        return SQLCursor(statement: statement, shapeSlot: rowShapes.slot(for: statement, sql: sql, state: call.state))
    }
}

/// An open `db.rows` statement. Finalized when the loop ends (by the C
/// iterator), breaks or fails (the generic `for`'s to-be-closed value),
/// when its transaction ends, or when it is collected.
final class SQLCursor: TransactionBoundCursor {
    /// The statement, where the C iterator finds it; nil once finalized.
    let statement: UnsafeMutablePointer<OpaquePointer?>
    /// Registry slot of the rows' shape (owned by ``RowShapes``).
    let shapeSlot: Int32

    init(statement: OpaquePointer?, shapeSlot: Int32) {
        self.statement = .allocate(capacity: 1)
        self.statement.initialize(to: statement)
        self.shapeSlot = shapeSlot
    }

    func close() {
        if let open = statement.pointee { sqlite3_finalize(open) }
        statement.pointee = nil
    }

    deinit {
        close()
        statement.deallocate()
    }
}
