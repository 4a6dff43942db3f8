import CLuaShim
import CSQLBridge
import LuaRuntime
import Store

/// The `db` module: SQL from Lua.
///
/// ```lua
/// local rows = db.query("SELECT id, status FROM builds WHERE status = ?", "running")
/// local row  = db.first("SELECT * FROM projects WHERE bundleIdentifier = :id", {id = "com.example.app"})
/// local n    = db.value("SELECT count(*) FROM telemetry")
/// local changes, lastId = db.exec("UPDATE builds SET status = 'failed' WHERE id = ?", id)
/// db.send("INSERT INTO events VALUES (?, ?)", id, name)   -- no result: pipelined in a transaction on PostgreSQL
/// db.copy("events", rows, { columns = {"id", "name"} })    -- bulk: COPY on PostgreSQL
/// for row in db.rows("SELECT * FROM telemetry") do … end   -- streams
/// db.transaction(function() … end)                         -- nests as savepoints
/// ```
enum DatabaseModule {
    static func install(in session: OpshSession) {
        let database = session.database
        let runtime = session.runtime
        // query/first/value/exec/rows: the engine's row path.
        session.rows.installStatementFunctions(in: runtime)
        CopyFunction.install(in: session)
        runtime.register(module: "db", [
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
        runtime.stack.push(database.engine.rawValue)
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


}
