import CLuaShim
import Foundation
import GRDB
import GRDBSQLite
import LuaRuntime

/// Runs SQL for Lua: picks the connection (the read connection, the
/// writer, or the open transaction's), binds the call's arguments, steps,
/// and pushes results. The `db` module is a thin layer over it.
final class SQLExecutor {
    enum ResultShape {
        /// An array of rows.
        case rows
        /// The first row, or nil.
        case first
        /// The first column of the first row, or nil.
        case value
        /// Changes count and last insert rowid.
        case changes
    }

    let session: SessionDatabase
    let readConnection: ReadConnection?
    let markers: SQLMarkers
    let rowShapes: RowShapes

    init(session: SessionDatabase, readConnection: ReadConnection?, markers: SQLMarkers, rowShapes: RowShapes) {
        self.session = session
        self.readConnection = readConnection
        self.markers = markers
        self.rowShapes = rowShapes
    }

    /// Runs `sql` with the arguments from `first` on and pushes the result.
    func run(_ sql: String, call: LuaCall, from first: Int32, shape: ResultShape) throws -> Int32 {
        if let current = session.current {
            return try run(sql, on: current, call: call, from: first, shape: shape)
        }
        if let readConnection {
            let statement = try readConnection.cachedStatement(sql)
            if sqlite3_stmt_readonly(statement) != 0 {
                return try step(statement, handle: readConnection.handle, sql: sql, call: call, from: first, shape: shape)
            }
        }
        return try session.writeStatement { db in
            try run(sql, on: db, call: call, from: first, shape: shape)
        }
    }

    private func run(_ sql: String, on db: Database, call: LuaCall, from first: Int32, shape: ResultShape) throws -> Int32 {
        let statement: Statement
        do {
            statement = try db.cachedStatement(sql: sql)
        } catch let error as DatabaseError {
            throw SQLFailure(message: error.message ?? "\(error.resultCode)", sql: sql)
        }
        let handle = statement.sqliteStatement
        if session.isDryRun && !statement.isReadonly {
            // Through GRDB, so the dry run's change counter sees the rows.
            let arguments = try StatementArgumentsReader.arguments(for: handle, call: call, from: first, markers: markers)
            do {
                try statement.execute(arguments: arguments)
            } catch let error as DatabaseError {
                throw SQLFailure(message: error.message ?? "\(error.resultCode)", sql: sql)
            }
            return pushChanges(db.sqliteConnection!, shape: shape, call: call)
        }
        if !statement.isReadonly { session.changedOutsideGRDB = true }
        return try step(handle, handle: db.sqliteConnection!, sql: sql, call: call, from: first, shape: shape)
    }

    /// Binds, steps to the end (or the first row), pushes, resets.
    private func step(_ statement: OpaquePointer, handle: OpaquePointer, sql: String, call: LuaCall,
                      from first: Int32, shape: ResultShape) throws -> Int32 {
        let state = call.state
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        try StatementBridge.bind(statement, call: call, from: first, markers: markers)
        switch shape {
        case .changes:
            var code = sqlite3_step(statement)
            while code == SQLITE_ROW { code = sqlite3_step(statement) }
            guard code == SQLITE_DONE else { throw failure(handle, sql) }
            return pushChanges(handle, shape: shape, call: call)
        case .value:
            let code = sqlite3_step(statement)
            if code == SQLITE_ROW, sqlite3_column_count(statement) > 0 {
                StatementBridge.pushColumn(statement, 0, type: sqlite3_column_type(statement, 0), state: state)
                return 1
            }
            guard code == SQLITE_DONE || code == SQLITE_ROW else { throw failure(handle, sql) }
            lua_pushnil(state)
            return 1
        case .first:
            let code = sqlite3_step(statement)
            if code == SQLITE_ROW {
                let shapeIndex = rowShapes.push(for: statement, sql: sql, call: call)
                StatementBridge.pushRow(statement, state: state, columnCount: sqlite3_column_count(statement),
                                        columnNames: shapeIndex, metatable: shapeIndex + 1)
                return 1
            }
            guard code == SQLITE_DONE else { throw failure(handle, sql) }
            lua_pushnil(state)
            return 1
        case .rows:
            let shapeIndex = rowShapes.push(for: statement, sql: sql, call: call)
            let columnCount = sqlite3_column_count(statement)
            lua_createtable(state, 0, 0)
            var count: lua_Integer = 0
            var code = sqlite3_step(statement)
            while code == SQLITE_ROW {
                StatementBridge.pushRow(statement, state: state, columnCount: columnCount,
                                        columnNames: shapeIndex, metatable: shapeIndex + 1)
                count += 1
                lua_rawseti(state, -2, count)
                code = sqlite3_step(statement)
            }
            guard code == SQLITE_DONE else { throw failure(handle, sql) }
            lua_pushvalue(state, shapeIndex + 2)
            lua_setmetatable(state, -2)
            return 1
        }
    }

    private func pushChanges(_ connection: OpaquePointer, shape: ResultShape, call: LuaCall) -> Int32 {
        lua_pushinteger(call.state, sqlite3_changes64(connection))
        lua_pushinteger(call.state, sqlite3_last_insert_rowid(connection))
        return 2
    }

    private func failure(_ handle: OpaquePointer, _ sql: String) -> SQLFailure {
        SQLFailure(message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }

    /// Runs a script of several statements without parameters.
    func runScript(_ sql: String) throws {
        try session.write { db in
            do {
                try db.execute(sql: sql)
            } catch let error as DatabaseError {
                throw SQLFailure(message: error.message ?? "\(error.resultCode)", sql: error.sql ?? sql)
            }
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
            handle = readConnection.handle
        } else {
            throw LuaCallError.message("db.rows needs a database file or an open transaction")
        }
        let statement = try ReadConnection.prepare(sql, on: handle)
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
        return SQLCursor(statement: statement, connection: handle, sql: sql)
    }
}

/// An open `db.rows` statement. Finalized when the loop ends, breaks,
/// fails (the generic `for`'s to-be-closed value), or is collected.
final class SQLCursor {
    private(set) var statement: OpaquePointer?
    let connection: OpaquePointer
    let sql: String

    init(statement: OpaquePointer, connection: OpaquePointer, sql: String) {
        self.statement = statement
        self.connection = connection
        self.sql = sql
    }

    func close() {
        if let statement { sqlite3_finalize(statement) }
        statement = nil
    }

    deinit { close() }
}
