import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store

/// A server's row path (``RowPath/wire(_:)``, PostgreSQL's session): each
/// statement's rows lent one at a time as a DataRow's bytes and made into
/// Lua tables in C as they arrive (``WireRowPusher``), counted against the
/// memory limit then; the `db` module's functions and Store's own
/// statements (the repositories, query keys) take the same path
/// (ARCHITECTURE.md, "The row path"). Values are read by SQLite's rules
/// (`?`, `?NNN`, `:name`; ``SQLValueReader``) and the server's session
/// rewrites the placeholders.
final class WireRows: RowRunner {
    let statements: any WireStatements
    let markers: SQLMarkers
    let rowShapes: RowShapes
    private let pusher: WireRowPusher

    init(statements: any WireStatements, markers: SQLMarkers, rowShapes: RowShapes) {
        self.statements = statements
        self.markers = markers
        self.rowShapes = rowShapes
        pusher = WireRowPusher(rowShapes: rowShapes)
    }

    /// Runs the call's statement (SQL at 1, values from 2), each row to `eachRow`.
    private func run(_ call: LuaCall, eachRow: (RowSource) throws -> Void) throws -> StatementOutcome {
        let sql = try SQLTextReader.sql(call)
        let arguments = try Self.arguments(call, from: 2, markers: markers)
        return try statements.run(sql, arguments, rows: eachRow)
    }

    func installStatementFunctions(in runtime: LuaRuntime) {
        runtime.register(module: "db", [
            "query": { [unowned self] call in
                try pushRows(call.state) { try run(call, eachRow: $0) }
            },
            "first": { [unowned self] call in
                try pushFirst(call.state) { try run(call, eachRow: $0) }
            },
            "value": { [unowned self] call in
                try pushValue(call.state) { try run(call, eachRow: $0) }
            },
            // db.send: db.exec without its result, so that a transaction's
            // writes are pipelined (PostgresDatabase+Pipeline); where the
            // script sent it names a failure raised later.
            "send": { [unowned self] call in
                let sql = try SQLTextReader.sql(call)
                let arguments = try Self.arguments(call, from: 2, markers: markers)
                try statements.send(sql, arguments, origin: scriptPosition(call.state))
                return 0
            },
            "exec": { [unowned self] call in
                // Without values, several statements run as a script (as on SQLite).
                let changes = call.argumentCount <= 1 ? try statements.runScript(try SQLTextReader.sql(call))
                    : try run(call) { _ in }.changes ?? 0
                return call.results(.integer(Int64(changes)))
            },
        ])
        // db.rows: the same loop as on SQLite, over a result read at once
        // whose rows become tables one at a time. The Lua function around
        // the host one keeps the errors as they were (`(db):3:`, 'query').
        runtime.pushFunction("query", { [unowned self] call in
            let state = call.state
            let (store, names) = try pusher.collect(state: state) { try run(call, eachRow: $0) }
            opsh_pg_push_rows_iterator(state, store, names, names + 1)
            luaReplace(state, store)
            lua_settop(state, store)
            return 1
        })
        lua_setglobal(runtime.state, "__opsh_wire_rows")
        _ = try? runtime.execute("""
            local query = __opsh_wire_rows; __opsh_wire_rows = nil
            function db.rows(sql, ...)
              local rows = query(sql, ...)
              return rows
            end
            """, chunkName: "=(db)")
    }

    /// `file:line` of the nearest Lua function up the stack (the one that
    /// called db.send, or called the pcall that did); nil when none is.
    /// A loop asks from one line again and again: its text is kept.
    private func scriptPosition(_ state: OpaquePointer) -> String? {
        var record = lua_Debug()
        var level: Int32 = 1
        while level <= 8, lua_getstack(state, level, &record) != 0 {
            level += 1
            guard lua_getinfo(state, "Sl", &record) != 0, record.currentline > 0 else { continue }
            let line = record.currentline
            if let last = lastPosition, last.line == line,
               withUnsafeBytes(of: &record.short_src, { $0.prefix { $0 != 0 }.elementsEqual(last.source) }) {
                return last.text
            }
            let source = withUnsafeBytes(of: &record.short_src) { Array($0.prefix { $0 != 0 }) }
            let text = String(decoding: source, as: UTF8.self) + ":\(record.currentline)"
            lastPosition = (source, record.currentline, text)
            return text
        }
        return nil
    }
    private var lastPosition: (source: [UInt8], line: Int32, text: String)?

    /// Store's own statement, pushed as `shape` says, made in C as the
    /// `db` module's rows are (no ``StoreValue`` per value).
    func run(_ sql: String, _ arguments: [StoreValue], shape: ResultShape, call: LuaCall) throws -> Int32 {
        let state = call.state
        lua_settop(state, 0)
        let execute = { [statements] (eachRow: (RowSource) throws -> Void) throws -> StatementOutcome in
            try statements.runOwn(sql, .positional(arguments), rows: eachRow)
        }
        switch shape {
        case .rows: return try pushRows(state, execute)
        case .first: return try pushFirst(state, execute)
        case .value: return try pushValue(state, execute)
        case .changes: return call.results(.integer(Int64(try execute { _ in }.changes ?? 0)))
        case .column: return try pushColumn(state, execute)
        }
    }

    /// Each row a table as it arrives, counted against the memory limit
    /// then: a result too large for the limit is refused before it is all
    /// read (the connection reads and drops the rest).
    private func pushRows(_ state: OpaquePointer, _ execute: ((RowSource) throws -> Void) throws -> StatementOutcome) throws -> Int32 {
        _ = lua_checkstack(state, 8)
        let base = lua_gettop(state)
        var names: Int32 = 0
        var count = 0
        let result: StatementOutcome
        do {
            result = try execute { source in
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
    }

    private func pushFirst(_ state: OpaquePointer, _ execute: ((RowSource) throws -> Void) throws -> StatementOutcome) throws -> Int32 {
        _ = lua_checkstack(state, 8)
        var row: Int32 = 0
        _ = try execute { source in
            guard row == 0, case let .wire(body, layout) = source else { return }
            pusher.prepare(layout)
            let names = pusher.pushShape(state: state)
            try pusher.pushRow(body, names: names, state: state)
            luaReplace(state, names)
            lua_settop(state, names)
            row = names
        }
        guard row != 0 else {
            lua_pushnil(state)
            return 1
        }
        lua_settop(state, row)
        return 1
    }

    private func pushValue(_ state: OpaquePointer, _ execute: ((RowSource) throws -> Void) throws -> StatementOutcome) throws -> Int32 {
        _ = lua_checkstack(state, 4)
        var value: Int32 = 0
        _ = try execute { source in
            guard value == 0, case let .wire(body, layout) = source else { return }
            pusher.prepare(layout)
            pusher.pushFirstColumn(body, state: state)
            value = lua_gettop(state)
        }
        guard value != 0 else {
            lua_pushnil(state)
            return 1
        }
        lua_settop(state, value)
        return 1
    }

    /// The first column of every row, as an array (a key's id list).
    private func pushColumn(_ state: OpaquePointer, _ execute: ((RowSource) throws -> Void) throws -> StatementOutcome) throws -> Int32 {
        _ = lua_checkstack(state, 4)
        lua_createtable(state, 0, 0)
        let array = lua_gettop(state)
        var count: lua_Integer = 0
        _ = try execute { source in
            guard case let .wire(body, layout) = source else { return }
            pusher.prepare(layout)
            pusher.pushFirstColumn(body, state: state)
            count += 1
            lua_rawseti(state, array, count)
        }
        return 1
    }

    /// PostgreSQL keeps each table's columns until a statement changes the schema.
    func spec(_ table: String, load: () throws -> TableSpec) throws -> TableSpec {
        try load()
    }

    /// Nothing to attach: the server's database is the session's one.
    func confine() {}

    /// The server sends what it has; rows count against the Lua limit as
    /// they arrive.
    func limitValueLength(to bytes: Int) {}

    /// A call's SQL values, by SQLite's rules: the values after the SQL,
    /// or one table that gives `:name`s by name and `?`s by position.
    /// Keys that are neither names nor positions of the table's array are
    /// refused: no value is dropped (``PostgresArguments`` checks the rest).
    static func arguments(_ call: LuaCall, from first: Int32, markers: SQLMarkers) throws -> SQLArguments {
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
