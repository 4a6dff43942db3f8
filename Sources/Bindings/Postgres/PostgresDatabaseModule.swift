import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store

/// The `db` module on PostgreSQL: the API of the SQLite one
/// (``DatabaseModule``), so that a script runs unchanged on both engines.
///
/// ```lua
/// db.engine                                             --> "postgresql"
/// local rows = db.query("SELECT id, status FROM builds WHERE status = ?", "running")
/// local row  = db.first("SELECT * FROM projects WHERE bundleIdentifier = :id", { id = "com.example.app" })
/// local n    = db.value("SELECT count(*) FROM telemetry")
/// local changes = db.exec("UPDATE builds SET status = 'failed' WHERE id = ?", id)
/// db.transaction(function()
///   local ok, err = pcall(db.exec, "INSERT INTO nope VALUES (1)")  -- fails; the transaction goes on
///   db.exec("INSERT INTO telemetry (event, created_at) VALUES (?, ?)", "x", os.time())
/// end)
/// ```
///
/// Differences from SQLite: `db.exec` returns the rows changed and no
/// rowid (use `RETURNING id` with `db.value`); `db.rows` reads the whole
/// result before the loop starts (each row becomes a table when the loop
/// reaches it). Every statement is PostgreSQL's SQL: `?` and `:name`
/// placeholders are rewritten into `$n`.
///
/// Rows become Lua tables in C, from the bytes as they arrived
/// (``PostgresRowPusher``).
enum PostgresDatabaseModule {
    static func install(in session: PostgresSession) {
        let database = session.database
        let markers = session.markers
        let pusher = PostgresRowPusher(rowShapes: session.rowShapes)

        /// Runs the call's statement, each row to `eachRow`.
        func run(_ call: LuaCall, eachRow: (RowSource) throws -> Void) throws -> PostgresDatabase.Result {
            let sql = try SQLTextReader.sql(call)
            let arguments = try Self.arguments(call, from: 2, markers: markers)
            return try database.execute(sql, arguments, rows: eachRow)
        }

        session.runtime.register(module: "db", [
            "query": { call in
                // Each row becomes a table as it arrives, counted against
                // the memory limit then: a result too large for the limit
                // is refused before it is all read (the connection reads
                // and drops the rest).
                let state = call.state
                _ = lua_checkstack(state, 8)
                let base = lua_gettop(state)
                var names: Int32 = 0
                var count = 0
                let result: PostgresDatabase.Result
                do {
                    result = try run(call) { source in
                        guard case let .wire(body, layout) = source else { return }
                        if names == 0 {
                            pusher.prepare(layout)
                            names = pusher.pushShape(state: state)
                            lua_createtable(state, 0, 0)
                        }
                        try pusher.pushRow(body, names: names, state: state)
                        count += 1
                        lua_rawseti(state, -2, lua_Integer(count))
                        try RowsMemoryLimit.check(state, base: base, rows: count)
                    }
                } catch {
                    lua_settop(state, base)
                    throw error
                }
                if names == 0 {
                    names = pusher.pushShape(columns: result.columns, state: state)
                    lua_createtable(state, 0, 0)
                }
                lua_pushvalue(state, names + 2)
                lua_setmetatable(state, -2)
                luaReplace(state, names)
                lua_settop(state, names)
                return 1
            },
            "first": { call in
                let state = call.state
                _ = lua_checkstack(state, 8)
                var row: Int32 = 0
                _ = try run(call) { source in
                    guard row == 0, case let .wire(body, layout) = source else { return }
                    pusher.prepare(layout)
                    let names = pusher.pushShape(state: state)
                    try pusher.pushRow(body, names: names, state: state)
                    luaReplace(state, names)
                    lua_settop(state, names)
                    row = names
                }
                guard row != 0 else { return call.results(nil) }
                lua_settop(state, row)
                return 1
            },
            "value": { call in
                let state = call.state
                _ = lua_checkstack(state, 4)
                var value: Int32 = 0
                _ = try run(call) { source in
                    guard value == 0, case let .wire(body, layout) = source else { return }
                    pusher.prepare(layout)
                    pusher.pushFirstColumn(body, state: state)
                    value = lua_gettop(state)
                }
                guard value != 0 else { return call.results(nil) }
                lua_settop(state, value)
                return 1
            },
            "exec": { call in
                // Without values, several statements run as a script (as on SQLite).
                let result = call.argumentCount <= 1 ? try database.executeScript(try SQLTextReader.sql(call)) : try run(call) { _ in }
                return call.results(.integer(Int64(result.changes ?? 0)))
            },
            "transaction": { call in
                let body = try call.function(1)
                let options = try DatabaseModule.transactionOptions(call, 2)
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
            "blob": { call in try DatabaseModule.blob(call) },
        ])
        session.runtime.stack.pushGlobal("db")
        session.runtime.stack.push("postgresql")
        session.runtime.stack.setField("engine", at: -2)
        session.runtime.stack.pop()
        // db.rows: the same loop as on SQLite, over a result read at once
        // whose rows become tables one at a time. The Lua function around
        // the host one keeps the errors as they were (`(db):3:`, 'query').
        session.runtime.pushFunction("query", { call in
            let state = call.state
            let (store, names) = try pusher.collect(state: state) { try run(call, eachRow: $0) }
            opsh_pg_push_rows_iterator(state, store, names, names + 1)
            luaReplace(state, store)
            lua_settop(state, store)
            return 1
        })
        lua_setglobal(session.runtime.state, "__opsh_pg_rows")
        _ = try? session.runtime.execute("""
            local query = __opsh_pg_rows; __opsh_pg_rows = nil
            function db.rows(sql, ...)
              local rows = query(sql, ...)
              return rows
            end
            """, chunkName: "=(db)")
    }

    /// A call's SQL values, by SQLite's rules: the values after the SQL,
    /// or one table that gives `:name`s by name and `?`s by position.
    /// Keys that are neither names nor positions of the table's array are
    /// refused: no value is dropped (``PostgresArguments`` checks the rest).
    static func arguments(_ call: LuaCall, from first: Int32, markers: SQLMarkers) throws -> PostgresDatabase.Arguments {
        let state = call.state
        let given = max(0, call.argumentCount - first + 1)
        if given == 1, lua_type(state, first) == LUA_TTABLE, !markers.isMarker(state, first) {
            var positional: [StoreValue] = []
            var named: [String: StoreValue] = [:]
            let length = lua_rawlen(state, first)
            lua_pushnil(state)
            while lua_next(state, first) != 0 {
                defer { opsh_pop(state, 1) }
                if lua_type(state, -2) == LUA_TSTRING {
                    let name = try call.stack.text(at: -2) { throw call.argumentError(first, "a parameter's name is not valid UTF-8 (\($0))") }
                    named[name] = try SQLValueReader.value(call, lua_gettop(state), argument: first, label: ":" + name,
                                                           markers: markers, dialect: .postgresql)
                } else if lua_isinteger(state, -2) == 0 || !(1...max(1, Int64(length))).contains(opsh_tointeger(state, -2, nil)) {
                    let key = lua_isinteger(state, -2) != 0 ? String(opsh_tointeger(state, -2, nil)) : "a \(call.stack.typeName(at: -2)) key"
                    throw PlaceholderMismatch.unusedNames(["[\(key)]"], sql: try SQLTextReader.sql(call))
                }
            }
            if length > 0 {
                for position in 1...Int64(length) {
                    lua_rawgeti(state, first, position)
                    defer { opsh_pop(state, 1) }
                    positional.append(try SQLValueReader.value(call, lua_gettop(state), argument: first, label: "?\(position)",
                                                               markers: markers, dialect: .postgresql))
                }
            }
            return .table(positional: positional, named: named)
        }
        var values: [StoreValue] = []
        if given > 0 {
            for index in first...(first + given - 1) {
                values.append(try SQLValueReader.value(call, index, argument: index, label: "?\(index - first + 1)",
                                                       markers: markers, dialect: .postgresql))
            }
        }
        return .positional(values)
    }

}
