import CLuaShim
import GRDBSQLite
import LuaRuntime

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
        session.runtime.register(module: "db", [
            "query": { call in try executor.run(call: call, shape: .rows) },
            "first": { call in try executor.run(call: call, shape: .first) },
            "value": { call in try executor.run(call: call, shape: .value) },
            "exec": { call in
                do {
                    return try executor.run(call: call, shape: .changes)
                } catch let failure as SQLFailure where failure.isSeveralStatements && call.argumentCount == 1 {
                    // A script of statements without parameters.
                    try executor.runScript(try call.string(1))
                    return call.results(0)
                }
            },
            "rows": { call in
                let cursor = try executor.openCursor(try call.string(1), call: call, from: 2)
                database.closeAtTransactionEnd(cursor)
                let rowShapes = executor.rowShapes
                call.host.pushFunction("rows iterator", { iteration in
                    guard let statement = cursor.statement else { return iteration.results(nil) }
                    let state = iteration.state
                    let code = sqlite3_step(statement)
                    if code == SQLITE_ROW {
                        // The generic `for` passes the shape holder (its
                        // state value) as argument 1: two lookups a row
                        // instead of a registry walk.
                        let names: Int32
                        if lua_type(state, 1) == LUA_TTABLE {
                            lua_rawgeti(state, 1, 1)
                            lua_rawgeti(state, 1, 2)
                            names = lua_gettop(state) - 1
                        } else {
                            names = rowShapes.push(slot: cursor.shapeSlot, state: state)
                        }
                        StatementBridge.pushRow(statement, state: state, columnCount: sqlite3_column_count(statement),
                                                columnNames: names, metatable: names + 1)
                        return 1
                    }
                    let failed = code != SQLITE_DONE
                    let message = failed ? String(cString: sqlite3_errmsg(cursor.connection)) : ""
                    cursor.close()
                    if failed { throw SQLFailure(message: message, sql: cursor.sql) }
                    return iteration.results(nil)
                }, on: call.state)
                _ = opsh_getref(call.state, cursor.shapeSlot)  // the loop's state: {names, row metatable, rows metatable}
                lua_pushnil(call.state)
                // The to-be-closed value: a loop that breaks or fails
                // finalizes the statement at once.
                call.host.pushObject(cursor, type: "opsh.cursor", methods: [
                    "close": closeCursor,
                ], metamethods: [
                    "__close": closeCursor,
                ], on: call.state)
                return 4
            },
            "transaction": { call in
                let body = try call.function(1)
                let results = try database.transaction {
                    try call.call(body, [], results: LUA_MULTRET)
                }
                for value in results { call.stack.push(value) }
                return Int32(results.count)
            },
            "inTransaction": { call in
                call.results(.boolean(database.isInTransaction))
            },
            "blob": { call in
                _ = try call.bytes(1)
                lua_createtable(call.state, 1, 0)
                lua_pushvalue(call.state, 1)
                lua_rawseti(call.state, -2, 1)
                lua_getfield(call.state, opsh_registryindex(), "opsh.blob")
                lua_setmetatable(call.state, -2)
                return 1
            },
        ])
    }

    /// `cursor:close()` and the generic `for`'s `__close`. The metatable is
    /// shared by every cursor, so the cursor comes from the argument.
    static func closeCursor(_ call: LuaCall) throws -> Int32 {
        try call.object(1, as: SQLCursor.self, typeName: "opsh.cursor").close()
        return 0
    }

}
