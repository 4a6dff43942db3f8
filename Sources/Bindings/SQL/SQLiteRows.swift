import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store

/// SQLite's row path (``RowPath/sqlite(_:)``): statements prepared once and
/// cached by the Lua string of their SQL, stepped in C on the connection
/// the session reads from (the open transaction's, else the read
/// connection's short snapshot), each row built straight into a Lua table
/// (ARCHITECTURE.md, "The row path"). The `db` module's functions run their
/// common case in C without entering Swift (`opsh_sql.c`'s fast path);
/// Store's own statements (the repositories, query keys) run on the same
/// cache (``RepositoryStatements``).
final class SQLiteRows: RowRunner {
    let database: SessionDatabase
    let executor: SQLExecutor
    let statements: RepositoryStatements
    private let readConnection: ReadConnection?

    init(database: SessionDatabase, runtime: LuaRuntime, markers: SQLMarkers, rowShapes: RowShapes) throws {
        self.database = database
        let store = database.store
        let readConnection = try store.path.map {
            try ReadConnection(path: store.readingName ?? $0, lockWait: store.lockWait, beforeFirstUse: { try store.connect() })
        }
        self.readConnection = readConnection
        executor = SQLExecutor(session: database, readConnection: readConnection, markers: markers, rowShapes: rowShapes)
        statements = RepositoryStatements(executor: executor)

        // Ctrl-C, a timeout or SIGTERM also stop the statement the read
        // connection runs (the session's own connections stop through
        // ``DatabaseSession/interruptRunning``).
        let reader = UncheckedSendable(readConnection)
        runtime.onInterrupt { _ in reader.value?.interrupt() }
        // sqlite3_interrupt does not reach a statement waiting for another
        // process's lock: that wait gives up while the chunk is interrupted.
        let interruptedRuntime = WeakReference(runtime)
        store.lockWait.abandon(when: { interruptedRuntime.object?.interruptRequested != nil })
        runtime.onIdle { [weak readConnection] in readConnection?.endSnapshot() }
    }

    func installStatementFunctions(in runtime: LuaRuntime) {
        let executor = executor
        let database = database
        // query/first/value/exec: the C fast path runs a cached statement
        // with plain values; Swift does the rest (first use, writes outside
        // a transaction, dry runs, tables of parameters, markers).
        let route = UnsafeMutableRawPointer(executor.route)
        let fastFunctions: [(String, opsh_fast_path, LuaHostFunction)] = [
            ("query", opsh_sql_fast_query, { call in
                if let written = try executor.writeReturnedRows(call: call) { return written }
                return try executor.run(call: call, shape: .rows)
            }),
            ("first", opsh_sql_fast_first, { call in try executor.run(call: call, shape: .first) }),
            ("value", opsh_sql_fast_value, { call in try executor.run(call: call, shape: .value) }),
            ("exec", opsh_sql_fast_exec, { call in
                do {
                    return try executor.run(call: call, shape: .changes)
                } catch let failure as SQLFailure where failure.isSeveralStatements && call.argumentCount == 1 {
                    // A script of statements without parameters.
                    try executor.runScript(try SQLTextReader.sql(call))
                    return call.results(0)
                }
            }),
        ]
        runtime.stack.pushGlobal("db")
        for (name, fastPath, body) in fastFunctions {
            runtime.pushFunction(name, body, fastPath: fastPath, data: route)
            runtime.stack.setField(name, at: -2)
        }
        runtime.stack.pop()
        runtime.register(module: "db", [
            // db.send: db.exec without its result. SQLite runs it at once
            // (in the process: there is no round trip to save).
            "send": { call in
                _ = try executor.run(call: call, shape: .changes)
                return 0
            },
            "rows": { call in
                let cursor = try executor.openCursor(try SQLTextReader.sql(call), call: call, from: 2)
                database.closeAtTransactionOrChunkEnd(cursor)
                // The to-be-closed value: a loop that breaks or fails
                // finalizes the statement at once. It also keeps the cursor
                // alive for the iterator.
                call.host.pushObject(cursor, type: "opsh.cursor", methods: [
                    "close": Self.closeCursor,
                ], metamethods: [
                    "__close": Self.closeCursor,
                ], on: call.state)
                let owner = lua_gettop(call.state)
                _ = opsh_getref(call.state, cursor.shapeSlot)  // {names, row metatable, rows metatable}
                lua_pushvalue(call.state, -1)
                opsh_sql_push_rows_iterator(call.state, cursor.statement, cursor.firstStep, owner, executor.route)  // takes one copy
                // for row in iterator, state (the shape), nil, closing value
                lua_rotate(call.state, -2, 1)
                lua_pushnil(call.state)
                lua_pushvalue(call.state, owner)
                return 4
            },
        ])
    }

    /// `cursor:close()` and the generic `for`'s `__close`. The metatable is
    /// shared by every cursor, so the cursor comes from the argument.
    static func closeCursor(_ call: LuaCall) throws -> Int32 {
        try call.object(1, as: SQLCursor.self, typeName: "opsh.cursor").close()
        return 0
    }

    func writeReturnedRows(as format: ReturnedRowsFormat?) {
        executor.returnedRows = format
    }

    func run(_ sql: String, _ arguments: [StoreValue], shape: ResultShape, call: LuaCall) throws -> Int32 {
        try statements.run(sql, arguments, shape: shape, call: call)
    }

    /// Read again only after a schema change (``RepositoryStatements/spec(_:load:)``).
    func spec(_ table: String, load: () throws -> TableSpec) throws -> TableSpec {
        try statements.spec(table, load: load)
    }

    /// No ATTACH (nor `VACUUM INTO`, which attaches), and the sandbox's
    /// statement guard on the read connection too.
    func confine() {
        database.limitEveryConnection(.attachedDatabases(0), readConnection: readConnection)
        readConnection.map(database.confine)
    }

    /// Under a memory limit, SQLite itself refuses to make a string or BLOB
    /// longer than the limit ("string or blob too big"): a
    /// `randomblob(100000000)` never costs 100 MB before Lua could refuse it.
    func limitValueLength(to bytes: Int) {
        database.limitEveryConnection(.valueLength(max(bytes, 1024)), readConnection: readConnection)
        // And what SQLite holds while it works (a sort, its page caches):
        // an eighth of the limit per connection.
        database.limitEveryConnection(.pageCache(max(bytes / 8, 256 << 10)), readConnection: readConnection)
    }
}
