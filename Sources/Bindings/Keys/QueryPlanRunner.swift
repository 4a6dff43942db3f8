import CLuaShim
import LuaRuntime
import Store

/// Runs a query key's ``QueryPlan`` for Lua: each statement on the
/// session's row path (``RowRunner``: rows built once, in C, into Lua
/// tables), on either engine, the parts assembled into one value as
/// ``QueryPlan/fetch(_:)`` assembles them for Swift callers.
///
/// A statement's run replaces the call's stack, so a part's value waits
/// in the registry while the next part runs.
struct QueryPlanRunner {
    let rows: any RowRunner
    let rowShapes: RowShapes
    /// What `opsh_ref` returns for nil (Lua's LUA_REFNIL).
    private static let nilSlot: Int32 = -1

    /// Runs `plan` and pushes its value (one result).
    func push(_ plan: QueryPlan, call: LuaCall) throws -> Int32 {
        if case .statement(let statement) = plan { return try run(statement, call) }
        let value = try kept(plan, call)
        lua_settop(call.state, 0)
        _ = opsh_getref(call.state, value)
        opsh_unref(call.state, value)
        return 1
    }

    private func run(_ statement: QueryStatement, _ call: LuaCall) throws -> Int32 {
        try run(statement, values: statement.values, call: call)
    }

    /// Runs `statement` with `values` in place of its own (a key's
    /// statement made once, ``IdKeyStatements``) and pushes its value.
    func run(_ statement: QueryStatement, values: [StoreValue], call: LuaCall) throws -> Int32 {
        let shape: ResultShape = switch statement.shape {
        case .row: .first
        case .rows: .rows
        case .ids: .column
        }
        return try rows.run(statement.sql, values, shape: shape, call: call)
    }

    /// Runs `plan` and keeps its value in the registry: the slot (Self.nilSlot for nil).
    private func kept(_ plan: QueryPlan, _ call: LuaCall) throws -> Int32 {
        let state = call.state
        switch plan {
        case .statement(let statement):
            _ = try run(statement, call)
            return opsh_ref(state)
        case .object(let parts):
            let values = try keptParts(parts, call, stopAtNilFirst: true)
            defer { release(values, state) }
            guard let first = values.first, first != Self.nilSlot else { return Self.nilSlot }
            lua_createtable(state, 0, Int32(parts.count))
            set(parts, values, state)
            return opsh_ref(state)
        case let .extendedRow(statement, parts):
            _ = try run(statement, call)
            let row = opsh_ref(state)
            guard row != Self.nilSlot else { return Self.nilSlot }
            let values = try keptParts(parts, call, stopAtNilFirst: false)
            defer { release(values, state) }
            lua_settop(state, 0)
            _ = opsh_getref(state, row)
            opsh_unref(state, row)
            set(parts, values, state)
            // The row's columns, then the parts: printers keep this order.
            let columns = Self.columns(ofRowAt: 1, state) + parts.map(\.name)
            // The row's date columns stay dates (a key's own shape).
            let dates = RowShapes.dates(ofRowAt: 1, columns: columns, state: state)
            let holder = rowShapes.push(columns: columns, dates: dates,
                                        key: RowShapes.valueKey(columns, dates: dates),
                                        state: state)
            lua_pushvalue(state, holder + 1)
            lua_setmetatable(state, 1)
            lua_settop(state, 1)
            return opsh_ref(state)
        case .pairs(let statement), .groups(let statement):
            _ = try run(statement, call)
            let rows = lua_gettop(state)
            lua_createtable(state, 0, 0)
            let object = lua_gettop(state)
            let count = lua_rawlen(state, rows)
            var index: lua_Integer = 1
            while index <= count {
                // Raw reads and writes only: no metamethod may raise while
                // Swift frames are on the stack (ARCHITECTURE.md, decision 1).
                lua_rawgeti(state, rows, index)
                let row = lua_gettop(state)
                index += 1
                guard Self.rawField("name", of: row, state) == LUA_TSTRING else {
                    lua_settop(state, object)
                    continue
                }
                let name = lua_gettop(state)
                if case .groups = plan {
                    lua_pushvalue(state, name)
                    if lua_rawget(state, object) != LUA_TTABLE {
                        lua_settop(state, name)
                        lua_createtable(state, 1, 0)
                        lua_pushvalue(state, name)
                        lua_pushvalue(state, -2)
                        lua_rawset(state, object)
                    }
                    _ = Self.rawField("value", of: row, state)
                    lua_rawseti(state, -2, lua_Integer(lua_rawlen(state, -2) + 1))
                } else {
                    _ = Self.rawField("value", of: row, state)
                    lua_rawset(state, object)
                }
                lua_settop(state, object)
            }
            return opsh_ref(state)
        }
    }

    private func keptParts(_ parts: [QueryPlan.Part], _ call: LuaCall, stopAtNilFirst: Bool) throws -> [Int32] {
        var values: [Int32] = []
        do {
            for part in parts {
                values.append(try kept(part.plan, call))
                if stopAtNilFirst, values.count == 1, values[0] == Self.nilSlot { break }
            }
        } catch {
            release(values, call.state)
            throw error
        }
        return values
    }

    /// Sets each part's value on the table on top (nil values stay absent).
    private func set(_ parts: [QueryPlan.Part], _ values: [Int32], _ state: OpaquePointer) {
        let table = lua_gettop(state)
        for (part, value) in zip(parts, values) where value != Self.nilSlot {
            LuaStack(state).push(part.name)
            _ = opsh_getref(state, value)
            lua_rawset(state, table)
        }
    }

    /// Pushes `table[name]` without metamethods; returns its type.
    private static func rawField(_ name: String, of table: Int32, _ state: OpaquePointer) -> Int32 {
        LuaStack(state).push(name)
        return lua_rawget(state, table)
    }

    private func release(_ values: [Int32], _ state: OpaquePointer) {
        for value in values where value != Self.nilSlot { opsh_unref(state, value) }
    }

    /// The `columns` its metatable lists for the row at `index`.
    private static func columns(ofRowAt index: Int32, _ state: OpaquePointer) -> [String] {
        guard lua_getmetatable(state, index) != 0 else { return [] }
        defer { lua_settop(state, lua_gettop(state) - 1) }
        guard lua_getfield(state, -1, "columns") == LUA_TTABLE else {
            lua_settop(state, lua_gettop(state) - 1)
            return []
        }
        defer { lua_settop(state, lua_gettop(state) - 1) }
        var names: [String] = []
        let count = lua_rawlen(state, -1)
        var position: lua_Integer = 1
        while position <= count {
            lua_rawgeti(state, -1, position)
            if let name = LuaStack(state).string(at: -1) { names.append(name) }
            lua_settop(state, lua_gettop(state) - 1)
            position += 1
        }
        return names
    }
}
