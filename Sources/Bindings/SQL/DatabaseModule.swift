import CLuaShim
import CSQLBridge
import GRDBSQLite
import LuaRuntime
import Store

/// The `db` module: SQL from Lua.
///
/// ```lua
/// local rows = db.query("SELECT id, status FROM builds WHERE status = ?", "running")
/// local row  = db.first("SELECT * FROM projects WHERE bundleIdentifier = :id", {id = "com.example.app"})
/// local n    = db.value("SELECT count(*) FROM telemetry")
/// local changes, lastId = db.exec("UPDATE builds SET status = 'failed' WHERE id = ?", id)
/// for row in db.rows("SELECT * FROM telemetry") do … end   -- streams
/// db.transaction(function() … end)                         -- nests as savepoints
/// ```
enum DatabaseModule {
    static func install(in session: OpshSession) {
        let executor = session.sql
        let database = session.database
        let runtime = session.runtime
        // query/first/value/exec: the C fast path runs a cached statement
        // with plain values; Swift does the rest (first use, writes outside
        // a transaction, dry runs, tables of parameters, markers).
        let route = UnsafeMutableRawPointer(executor.route)
        let fastFunctions: [(String, opsh_fast_path, LuaHostFunction)] = [
            ("query", opsh_sql_fast_query, { call in try executor.run(call: call, shape: .rows) }),
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
        runtime.register(module: "db", [:])
        runtime.stack.pushGlobal("db")
        for (name, fastPath, body) in fastFunctions {
            runtime.pushFunction(name, body, fastPath: fastPath, data: route)
            runtime.stack.setField(name, at: -2)
        }
        runtime.stack.pop()
        runtime.register(module: "db", [
            "rows": { call in
                let cursor = try executor.openCursor(try SQLTextReader.sql(call), call: call, from: 2)
                database.closeAtTransactionEnd(cursor)
                // The to-be-closed value: a loop that breaks or fails
                // finalizes the statement at once. It also keeps the cursor
                // alive for the iterator.
                call.host.pushObject(cursor, type: "opsh.cursor", methods: [
                    "close": closeCursor,
                ], metamethods: [
                    "__close": closeCursor,
                ], on: call.state)
                let owner = lua_gettop(call.state)
                _ = opsh_getref(call.state, cursor.shapeSlot)  // {names, row metatable, rows metatable}
                lua_pushvalue(call.state, -1)
                opsh_sql_push_rows_iterator(call.state, cursor.statement, owner, executor.route)  // takes one copy
                // for row in iterator, state (the shape), nil, closing value
                lua_rotate(call.state, -2, 1)
                lua_pushnil(call.state)
                lua_pushvalue(call.state, owner)
                return 4
            },
            "transaction": { call in
                let body = try call.function(1)
                let options = try Self.transactionOptions(call, 2)
                let results = try database.transaction(changeLimit: options.changeLimit,
                                                       allowSchemaChanges: options.allowSchemaChanges) {
                    try call.call(body, [], results: LUA_MULTRET)
                }
                for value in results { call.stack.push(value) }
                return Int32(results.count)
            },
            "inTransaction": { call in
                call.results(.boolean(database.isInTransaction))
            },
            "blob": { call in try blob(call) },
        ])
        runtime.stack.pushGlobal("db")
        runtime.stack.push("sqlite")
        runtime.stack.setField("engine", at: -2)
        runtime.stack.pop()
    }

    /// `db.blob(bytes)`: the bytes marked as a BLOB (a string binds as text
    /// when it is valid UTF-8). The same on every engine.
    static func blob(_ call: LuaCall) throws -> Int32 {
        _ = try call.bytes(1)
        lua_createtable(call.state, 1, 0)
        lua_pushvalue(call.state, 1)
        lua_rawseti(call.state, -2, 1)
        lua_getfield(call.state, opsh_registryindex(), "opsh.blob")
        lua_setmetatable(call.state, -2)
        return 1
    }

    /// `db.transaction(fn, { maxChanges = N, allowSchemaChanges = true })`:
    /// the most rows the transaction may change (nil: no cap), and whether
    /// a schema change may pass the cap (nil: the session's
    /// `--allow-schema-changes`).
    static func transactionOptions(_ call: LuaCall, _ index: Int32) throws -> (changeLimit: Int?, allowSchemaChanges: Bool?) {
        guard !call.isNoneOrNil(index) else { return (nil, nil) }
        let options = try call.table(index)
        for name in options.keys.sorted() where name != "maxChanges" && name != "allowSchemaChanges" {
            throw call.argumentError(index, "unknown option '\(name)' (options: maxChanges, allowSchemaChanges)")
        }
        var limit: Int?
        switch options["maxChanges"] {
        case nil: break
        case let .integer(value)? where value >= 0: limit = Int(value)
        case let value?:
            throw call.argumentError(index, "option 'maxChanges' must be a whole number of rows >= 0, got \(value.typeName == "number" ? "a negative or fractional number" : value.typeName)")
        }
        switch options["allowSchemaChanges"] {
        case nil: return (limit, nil)
        case let .boolean(allowed)?: return (limit, allowed)
        case let value?: throw call.argumentError(index, "option 'allowSchemaChanges' must be true or false, got \(value.typeName)")
        }
    }

    /// `cursor:close()` and the generic `for`'s `__close`. The metatable is
    /// shared by every cursor, so the cursor comes from the argument.
    static func closeCursor(_ call: LuaCall) throws -> Int32 {
        try call.object(1, as: SQLCursor.self, typeName: "opsh.cursor").close()
        return 0
    }

}
