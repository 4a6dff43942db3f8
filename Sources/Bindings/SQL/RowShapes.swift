import CLuaShim
import CSQLBridge
import LuaRuntime

/// What every row of one statement shares, kept in Lua per SQL text: the
/// array of column names (in SELECT order), the row metatable and the
/// row-set metatable.
///
/// A row is a plain table of its non-NULL columns. Its metatable's
/// `__index` tells NULL from a typo: a column of the statement that is
/// NULL reads as nil, a name that is not a column raises
/// `no column 'nmae' in this row (columns: id, name)`. The metatables
/// carry `columns`, so printers keep the SELECT order.
final class RowShapes {
    private struct Shape {
        /// Registry slot of `{names, rowMetatable, rowsMetatable}`.
        let slot: Int32
        let columnCount: Int32
    }

    private var shapes: [String: Shape] = [:]
    private unowned let runtime: LuaRuntime

    init(runtime: LuaRuntime) {
        self.runtime = runtime
    }

    /// Pushes the names array, the row metatable and the rows metatable
    /// (three values) of a cached statement's rows and returns the index of
    /// the first.
    func push(for entry: StatementCache.Entry, state: OpaquePointer) -> Int32 {
        let count = opsh_sqlite_column_count(entry.statement)
        if entry.shapeColumns == count { return pushShape(entry.shapeSlot, state: state) }
        if entry.shapeSlot >= 0 { opsh_unref(state, entry.shapeSlot) }
        entry.shapeSlot = makeShape(StatementBridge.columnNames(entry.statement), state: state)
        entry.shapeColumns = count
        return pushShape(entry.shapeSlot, state: state)
    }

    /// The registry slot of the shape of a statement of its own (a
    /// `db.rows` cursor), kept per SQL text.
    func slot(for statement: OpaquePointer, sql: String, state: OpaquePointer) -> Int32 {
        let count = opsh_sqlite_column_count(statement)
        if let shape = shapes[sql], shape.columnCount == count { return shape.slot }
        if let old = shapes[sql] { opsh_unref(state, old.slot) }
        let slot = makeShape(StatementBridge.columnNames(statement), state: state)
        shapes[sql] = Shape(slot: slot, columnCount: count)
        return slot
    }

    /// Pushes the shape of rows with the given columns (for rows that do
    /// not come from a statement, e.g. repositories).
    func push(columns names: [String], key: String, state: OpaquePointer) -> Int32 {
        pushShape(slot(columns: names, key: key, state: state), state: state)
    }

    /// The registry slot of the shape of rows with the given columns.
    func slot(columns names: [String], key: String, state: OpaquePointer) -> Int32 {
        if let shape = shapes[key], shape.columnCount == names.count {
            // Same count: the same columns for a repository's table.
            return shape.slot
        }
        if let old = shapes[key] { opsh_unref(state, old.slot) }
        let slot = makeShape(names, state: state)
        shapes[key] = Shape(slot: slot, columnCount: Int32(names.count))
        return slot
    }

    private func pushShape(_ slot: Int32, state: OpaquePointer) -> Int32 {
        opsh_sql_push_shape(state, slot)
    }

    private func makeShape(_ names: [String], state: OpaquePointer) -> Int32 {
        let stack = LuaStack(state)
        lua_createtable(state, 3, 0)  // holder
        lua_createtable(state, Int32(names.count), 0)
        for (offset, name) in names.enumerated() {
            stack.push(name)
            lua_rawseti(state, -2, lua_Integer(offset + 1))
        }
        let namesIndex = lua_gettop(state)
        // Row metatable.
        lua_createtable(state, 0, 3)
        stack.push("opsh.row")
        stack.setField("__name", at: -2)
        lua_pushvalue(state, namesIndex)
        stack.setField("columns", at: -2)
        let columnSet = Set(names)
        let listed = names.joined(separator: ", ")
        runtime.pushFunction("__index", { call in
            let key = call.stack.string(at: 2)
            if let key, columnSet.contains(key) { return 0 }
            let shown = key ?? call.stack.typeName(at: 2)
            throw LuaCallError.message("no column '\(shown)' in this row (columns: \(listed))")
        }, on: state)
        stack.setField("__index", at: -2)
        // Rows metatable.
        lua_createtable(state, 0, 2)
        stack.push("opsh.rows")
        stack.setField("__name", at: -2)
        lua_pushvalue(state, namesIndex)
        stack.setField("columns", at: -2)
        // holder = {names, row, rows}
        lua_rawseti(state, namesIndex - 1, 3)
        lua_rawseti(state, namesIndex - 1, 2)
        lua_rawseti(state, namesIndex - 1, 1)
        return opsh_ref(state)
    }
}
