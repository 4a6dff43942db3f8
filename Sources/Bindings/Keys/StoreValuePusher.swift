import CLuaShim
import LuaRuntime
import Store

/// Pushes a ``StoreValue`` (what query keys and watches fetch) as Lua
/// values: rows as row tables with the `db` module's metatables
/// (`opsh.row`, NULL columns absent, a typo raises), arrays of rows as
/// `opsh.rows` (the shell prints them as tables), arrays of ids as plain
/// arrays, other objects as plain tables.
struct StoreValuePusher {
    let rowShapes: RowShapes
    let state: OpaquePointer

    /// - parameters:
    ///   - asRows: objects at this level are rows (else plain tables,
    ///     whose nested objects are rows).
    ///   - columns: the columns of an array of rows, for an empty one.
    func push(_ value: StoreValue, asRows: Bool, columns: [String]? = nil) {
        _ = lua_checkstack(state, 8)
        switch value {
        case .null: lua_pushnil(state)
        case .integer(let number): lua_pushinteger(state, number)
        case .real(let number): lua_pushnumber(state, number)
        case .text(let text): LuaStack(state).push(text)
        case .blob(let bytes): LuaStack(state).push(bytes: bytes)
        case .object(let fields):
            if asRows { pushRow(fields) } else { pushTable(fields) }
        case .array(let elements):
            let rows = elements.compactMap { element -> [StoreValue.Field]? in
                if case .object(let fields) = element { return fields }
                return nil
            }
            if asRows, rows.count == elements.count, let shape = rows.first.map({ $0.map(\.name) }) ?? columns {
                pushRows(rows, columns: shape)
            } else {
                lua_createtable(state, Int32(clamping: elements.count), 0)
                for (offset, element) in elements.enumerated() {
                    push(element, asRows: true)
                    lua_rawseti(state, -2, lua_Integer(offset + 1))
                }
            }
        }
    }

    private func shape(_ names: [String]) -> Int32 {
        rowShapes.push(columns: names, key: "opsh.value:" + names.joined(separator: "\u{1F}"), state: state)
    }

    /// Moves the value on top down to `holder` and drops the three shape
    /// values above it.
    private func dropShape(at holder: Int32) {
        lua_rotate(state, holder, 1)
        lua_settop(state, holder)
    }

    private func fill(_ fields: [StoreValue.Field]) {
        for field in fields where field.value != .null {
            LuaStack(state).push(field.name)
            push(field.value, asRows: true)
            lua_rawset(state, -3)
        }
    }

    private func pushRow(_ fields: [StoreValue.Field]) {
        let holder = shape(fields.map(\.name))
        lua_createtable(state, 0, Int32(clamping: fields.count))
        fill(fields)
        lua_pushvalue(state, holder + 1)
        lua_setmetatable(state, -2)
        dropShape(at: holder)
    }

    private func pushRows(_ rows: [[StoreValue.Field]], columns: [String]) {
        let holder = shape(columns)
        lua_createtable(state, Int32(clamping: rows.count), 0)
        for (offset, row) in rows.enumerated() {
            pushRow(row)
            lua_rawseti(state, -2, lua_Integer(offset + 1))
        }
        lua_pushvalue(state, holder + 2)
        lua_setmetatable(state, -2)
        dropShape(at: holder)
    }

    /// Rows of values in `columns`' order (another engine's result: a
    /// repository's on PostgreSQL), as `db.query` returns them: one shape
    /// for every row, NULL columns absent.
    func pushRows(columns: [String], rows: [[StoreValue]]) {
        _ = lua_checkstack(state, 8)
        let holder = shape(columns)
        lua_createtable(state, Int32(clamping: rows.count), 0)
        for (offset, row) in rows.enumerated() {
            pushRow(columns: columns, values: row, holder: holder)
            lua_rawseti(state, -2, lua_Integer(offset + 1))
        }
        lua_pushvalue(state, holder + 2)
        lua_setmetatable(state, -2)
        dropShape(at: holder)
    }

    /// One row of values in `columns`' order (another engine's: a
    /// repository's first row on PostgreSQL).
    func pushRow(columns: [String], values: [StoreValue]) {
        _ = lua_checkstack(state, 8)
        let holder = shape(columns)
        pushRow(columns: columns, values: values, holder: holder)
        dropShape(at: holder)
    }

    private func pushRow(columns: [String], values: [StoreValue], holder: Int32) {
        lua_createtable(state, 0, Int32(clamping: columns.count))
        for (name, value) in zip(columns, values) where value != .null {
            LuaStack(state).push(name)
            push(value, asRows: true)
            lua_rawset(state, -3)
        }
        lua_pushvalue(state, holder + 1)
        lua_setmetatable(state, -2)
    }

    private func pushTable(_ fields: [StoreValue.Field]) {
        lua_createtable(state, 0, Int32(clamping: fields.count))
        fill(fields)
    }
}

extension QueryKey {
    /// Whether the key's value is a row or rows (else a plain table whose
    /// nested objects are rows).
    var valueIsRows: Bool {
        switch self {
        case .projectVersionStrings, .projectDetail, .telemetryCounts: return false
        default: return true
        }
    }
}
