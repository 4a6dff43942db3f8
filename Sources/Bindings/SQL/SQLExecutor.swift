import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store
import TextCodec

/// Runs SQL for Lua: picks the connection (the read connection, the
/// writer, or the open transaction's), binds the call's arguments, steps,
/// and pushes results. The `db` module is a thin layer over it.
final class SQLExecutor {
    let session: SessionDatabase
    let readConnection: ReadConnection?
    let markers: SQLMarkers
    let rowShapes: RowShapes
    let statements: StatementCache
    /// Set while a batch run writes the rows it returns straight from the
    /// statement (``ReturnedRows``).
    var returnedRows: ReturnedRowsFormat? {
        didSet { route.pointee.writes_returned_rows = returnedRows == nil ? 0 : 1 }
    }
    /// The last outermost function ``ReturnedRows`` examined.
    var chunkResultCache = opsh_chunk_result_cache(function: nil, reference: 0, tail_register: -1)
    /// What the C fast path reads: the session's route (where statements
    /// run) and the statement cache.
    var route: UnsafeMutablePointer<opsh_sql_route> { statements.route }

    init(session: SessionDatabase, readConnection: ReadConnection?, markers: SQLMarkers, rowShapes: RowShapes) {
        self.session = session
        self.readConnection = readConnection
        self.markers = markers
        self.rowShapes = rowShapes
        statements = StatementCache(session: session.route, reader: readConnection)
        session.route.pointee.reader = readConnection?.snapshot
        route.pointee.failure_text = { state, message, sql in
            let failure = SQLFailure(message: message.map { String(cString: $0) } ?? "unknown error",
                                     sql: sql.map { String(cString: $0) })
            LuaStack(state!).push(failure.description)
        }
        // A db.rows loop that keeps its snapshot (opsh_rows_spill.h): its
        // chunk name and the copy's error may hold control characters.
        route.pointee.note_context = Unmanaged.passUnretained(session).toOpaque()
        route.pointee.note = { context, text in
            guard let context, let text else { return }
            let session = Unmanaged<SessionDatabase>.fromOpaque(context).takeUnretainedValue()
            session.sayNote(VisibleText.of(String(cString: text)))
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
        if let current = try session.liveTransactionConnection() {
            let results = try run(on: current, call: call, shape: shape)
            try session.afterWrite()  // --max-changes stops a runaway loop at once
            return results
        }
        if let readConnection {
            do {
                try readConnection.ready()
                // The read connection is NOMUTEX: prepared, stepped and read
                // under the reader's lock (ReadConnection.lending).
                let results = try readConnection.lending { handle -> Int32? in
                    let entry = try statements.statement(for: call.state, at: 1, on: handle)
                    guard entry.isReadonly else { return nil }
                    readConnection.useSnapshot(writeCount: session.writeCount)
                    return try step(entry, connection: handle, call: call, shape: shape)
                }
                if let results { return results }
            } catch let failure as SQLFailure where ["no such table", "no such trigger", "no such view", "no such index"]
                        .contains(where: failure.message.hasPrefix) {
                // A TEMP table (trigger, view, index) lives on the
                // connection that made it, the writer's: the statement runs
                // there (below), or fails there with the same message.
            }
        }
        return try session.writeStatement { writer in
            try run(on: writer, call: call, shape: shape)
        }
    }

    private func run(on writer: SQLiteWriterConnection, call: LuaCall, shape: ResultShape) throws -> Int32 {
        let connection = writer.handle
        let entry = try statements.statement(for: call.state, at: 1, on: connection)
        // What an `IF [NOT] EXISTS` statement does is known only now: the
        // step prepares it again when the schema changed since it was kept,
        // and it may then drop or make a table (the repositories read the
        // schema again, a dropped table's rows are counted).
        let effects = entry.effects.mayChangeSchema ? try TransactionGuard.check(entry.statement, on: connection) : entry.effects
        // A dropped table's rows are counted as deleted (no row change
        // reports them).
        return try session.countingDroppedRows(of: effects, on: connection) {
            try run(entry, on: writer, call: call, shape: shape)
        }
    }

    private func run(_ entry: StatementCache.Entry, on writer: SQLiteWriterConnection, call: LuaCall,
                     shape: ResultShape) throws -> Int32 {
        let connection = writer.handle
        if session.isCountingChanges && !entry.isReadonly {
            // Through GRDB, so the dry run's change counter sees the rows;
            // bound by the same rules as the C path (text with its length).
            try writer.executeThroughGRDB(entry.sql) {
                try StatementBridge.bind($0, call: call, from: 2, markers: markers, copy: true)
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
            opsh_sqlite_reset_and_clear(statement)
        }
        try StatementBridge.bind(statement, call: call, from: 2, markers: markers)
        switch shape {
        case .changes:
            var code = opsh_sqlite_step(statement)
            while code == OPSH_SQLITE_ROW { code = opsh_sqlite_step(statement) }
            guard code == OPSH_SQLITE_DONE else { throw failure(connection, entry) }
            return pushChanges(connection, call: call)
        case .value:
            let code = opsh_sqlite_step(statement)
            if code == OPSH_SQLITE_ROW, opsh_sqlite_column_count(statement) > 0 {
                opsh_sql_push_column(state, statement, 0)
                return 1
            }
            guard code == OPSH_SQLITE_DONE || code == OPSH_SQLITE_ROW else { throw failure(connection, entry) }
            lua_pushnil(state)
            return 1
        case .first:
            let code = opsh_sqlite_step(statement)
            if code == OPSH_SQLITE_ROW {
                let shapeIndex = rowShapes.push(for: entry, state: state)
                opsh_sql_push_row(state, statement, opsh_sqlite_column_count(statement), shapeIndex, shapeIndex + 1)
                return 1
            }
            guard code == OPSH_SQLITE_DONE else { throw failure(connection, entry) }
            lua_pushnil(state)
            return 1
        case .column:
            let base = lua_gettop(state)
            lua_createtable(state, 0, 0)
            var count: lua_Integer = 0
            var code = opsh_sqlite_step(statement)
            while code == OPSH_SQLITE_ROW, opsh_sqlite_column_count(statement) > 0 {
                opsh_sql_push_column(state, statement, 0)
                count += 1
                lua_rawseti(state, -2, count)
                try RowsMemoryLimit.check(state, base: base, rows: Int(count))
                code = opsh_sqlite_step(statement)
            }
            guard code == OPSH_SQLITE_DONE || code == OPSH_SQLITE_ROW else { throw failure(connection, entry) }
            return 1
        case .rows:
            let base = lua_gettop(state)
            var code = opsh_sqlite_step(statement)
            // After the first step, which prepares the statement again if
            // the schema changed (RowShapes.push(for:)).
            let shapeIndex = rowShapes.push(for: entry, state: state)
            let columnCount = opsh_sqlite_column_count(statement)
            lua_createtable(state, 0, 0)
            var count: lua_Integer = 0
            while code == OPSH_SQLITE_ROW {
                opsh_sql_push_row(state, statement, columnCount, shapeIndex, shapeIndex + 1)
                count += 1
                lua_rawseti(state, -2, count)
                try RowsMemoryLimit.check(state, base: base, rows: Int(count))
                code = opsh_sqlite_step(statement)
            }
            guard code == OPSH_SQLITE_DONE else { throw failure(connection, entry) }
            lua_pushvalue(state, shapeIndex + 2)
            lua_setmetatable(state, -2)
            return 1
        }
    }

    private func pushChanges(_ connection: OpaquePointer, call: LuaCall) -> Int32 {
        opsh_sql_push_changes(call.state, connection)
        return 2
    }

    private func failure(_ connection: OpaquePointer, _ entry: StatementCache.Entry) -> SQLFailure {
        SQLFailure(message: String(cString: opsh_sqlite_errmsg(connection)), sql: entry.sql)
    }

    /// Runs a script of several statements without parameters
    /// (``SessionDatabase/runScript(_:)``: each statement is checked by
    /// ``TransactionGuard`` before it runs).
    func runScript(_ sql: String) throws {
        try session.runScript(sql)
    }

    // MARK: Cursors

    /// Opens a cursor for `db.rows`: a statement of its own, on the open
    /// transaction's connection or the read connection.
    func openCursor(_ sql: String, call: LuaCall, from first: Int32) throws -> SQLCursor {
        if let current = session.transactionConnection {
            return try openCursor(sql, on: current.handle, call: call, from: first)
        }
        guard let readConnection else {
            throw LuaCallError.message("db.rows needs a database file or an open transaction")
        }
        try readConnection.ready()
        return try readConnection.lending { handle in
            readConnection.useSnapshot(writeCount: session.writeCount)
            return try openCursor(sql, on: handle, call: call, from: first)
        }
    }

    private func openCursor(_ sql: String, on handle: OpaquePointer, call: LuaCall, from first: Int32) throws -> SQLCursor {
        let statement: OpaquePointer
        do {
            statement = try ReadConnection.prepare(sql, on: handle)
        } catch let failure as SQLFailure where failure.isNoStatement {
            // Nothing to do: a loop over no rows.
            let given = max(0, call.argumentCount - first + 1)
            guard given == 0 else { throw PlaceholderMismatch.count(placeholders: 0, given: Int(given), hint: nil, sql: sql) }
            return SQLCursor(statement: nil, shapeSlot: rowShapes.slot(columns: [], key: "", state: call.state), reader: readConnection)
        }
        guard opsh_sqlite_readonly(statement) != 0 else {
            opsh_sqlite_finalize(statement)
            throw SQLFailure(message: "db.rows only reads; run changes with db.exec", sql: sql)
        }
        do {
            try StatementBridge.bind(statement, call: call, from: first, markers: markers, copy: true)
        } catch {
            opsh_sqlite_finalize(statement)
            throw error
        }
        // The first step before the shape: it prepares the statement again
        // if another connection changed the schema since this connection
        // read it, and the columns may then be others (DROP b, ADD d).
        let first = opsh_sqlite_step(statement)
        guard first == OPSH_SQLITE_ROW || first == OPSH_SQLITE_DONE else {
            let failure = SQLFailure(message: String(cString: opsh_sqlite_errmsg(handle)), sql: sql)
            opsh_sqlite_finalize(statement)
            throw failure
        }
        return SQLCursor(statement: statement, shapeSlot: rowShapes.slot(for: statement, sql: sql, state: call.state),
                         reader: readConnection, firstStep: first)
    }
}

/// An open `db.rows` statement. Finalized when the loop ends (by the C
/// iterator), breaks or fails (the generic `for`'s to-be-closed value),
/// when its transaction or the shell's chunk ends (a loop left open at the
/// prompt would keep the read connection's snapshot, and the WAL, for as
/// long as the operator sits there: ARCHITECTURE.md, decision 8), or when
/// it is collected.
final class SQLCursor: TransactionBoundCursor {
    /// The statement, where the C iterator finds it; nil once finalized.
    /// The second slot is set once ``closeAtItsEnd()`` closed it: the
    /// iterator then refuses to go on rather than end the loop quietly.
    /// The third and fourth hold what the loop reads after the first, in
    /// order, while the first is a copy of part of its rest: the rows a
    /// failed copy held, the loop's own statement, still open
    /// (`opsh_rows_spill.h`).
    let statement: UnsafeMutablePointer<OpaquePointer?>
    /// Registry slot of the rows' shape (owned by ``RowShapes``).
    let shapeSlot: Int32
    /// The code of the statement's first step, taken before the shape was
    /// made (0: none taken); the C iterator's first call uses it.
    let firstStep: Int32
    /// The read connection, whose lock a finalize takes (the statement may
    /// be on it); kept alive until the statement is finalized.
    private let reader: ReadConnection?

    /// A statement on the read connection keeps its snapshot's watchdog
    /// off the connection until it is finalized: the C iterator steps it
    /// without the reader's lock (`opsh_reader.h`).
    init(statement: OpaquePointer?, shapeSlot: Int32, reader: ReadConnection?, firstStep: Int32 = 0) {
        self.firstStep = firstStep
        self.statement = .allocate(capacity: 4)
        self.statement.initialize(to: statement)
        (self.statement + 1).initialize(to: nil)
        (self.statement + 2).initialize(to: nil)
        (self.statement + 3).initialize(to: nil)
        self.shapeSlot = shapeSlot
        self.reader = reader
        if let reader, let statement { reader.lending { _ in opsh_sql_reader_cursor_opened(reader.snapshot, statement) } }
    }

    func close() {
        for part in 2...3 {
            if let rest = statement[part], let reader {
                statement[part] = nil
                opsh_sql_reader_finalize_cursor(reader.snapshot, rest)
            }
        }
        guard let open = statement.pointee else { return }
        statement.pointee = nil
        if let reader {
            opsh_sql_reader_finalize_cursor(reader.snapshot, open)
        } else {
            opsh_sqlite_finalize(open)
        }
    }

    func closeAtItsEnd() {
        guard let open = statement.pointee else { return }
        statement[1] = open  // only compared with nil: "closed by its end"
        close()
    }

    deinit {
        close()
        statement.deinitialize(count: 4)
        statement.deallocate()
    }
}
