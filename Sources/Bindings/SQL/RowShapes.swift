import CLuaShim
import CSQLBridge
import LuaRuntime
import Store

/// What every row of one statement shares, kept in Lua per SQL text: the
/// array of column names (in SELECT order), the row metatable and the
/// row-set metatable.
///
/// A row is a plain table of its non-NULL columns. Its metatable's
/// `__index` tells NULL from a typo: a column of the statement that is
/// NULL reads as nil, a name that is not a column raises
/// `no column 'nmae' in this row (columns: id, name)`. The metatables
/// carry `columns`, so printers keep the SELECT order, and `dates` (the
/// columns the schema declares as seconds since 1970, as a set: `dates.
/// createdAt == true`; absent when none is), so the shell shows those as
/// dates (``DeclaredTimeColumns``).
final class RowShapes {
    private struct Shape {
        /// Registry slot of `{names, rowMetatable, rowsMetatable}`.
        let slot: Int32
        let columnCount: Int32
        /// The columns of a statement's shape kept per SQL text (nil where
        /// the key itself names the columns).
        let names: [String]?
    }

    private var shapes: [String: Shape] = [:]
    private unowned let runtime: LuaRuntime

    init(runtime: LuaRuntime) {
        self.runtime = runtime
    }

    /// Pushes the names array, the row metatable and the rows metatable
    /// (three values) of a cached statement's rows and returns the index of
    /// the first.
    ///
    /// Called after the statement's first step: a step prepares a statement
    /// again once the schema changed, and its columns may then be others
    /// under the same count (DROP b, ADD d): the shape is made anew then.
    func push(for entry: StatementCache.Entry, state: OpaquePointer) -> Int32 {
        let count = opsh_sqlite_column_count(entry.statement)
        let reprepares = opsh_sqlite_reprepares(entry.statement)
        if entry.shapeColumns == count && entry.shapeReprepares == reprepares {
            return pushShape(entry.shapeSlot, state: state)
        }
        if entry.shapeSlot >= 0 { opsh_unref(state, entry.shapeSlot) }
        entry.shapeSlot = makeShape(StatementBridge.columnNames(entry.statement),
                                    dates: DeclaredTimeColumns.ofSQLiteStatement(entry.statement), state: state)
        entry.shapeColumns = count
        entry.shapeReprepares = reprepares
        return pushShape(entry.shapeSlot, state: state)
    }

    /// The registry slot of the shape of a statement of its own (a
    /// `db.rows` cursor), kept per SQL text.
    /// The same text names other columns once the schema changed (DROP b,
    /// ADD d: the same count), so the names are compared, not the count.
    func slot(for statement: OpaquePointer, sql: String, state: OpaquePointer) -> Int32 {
        let names = StatementBridge.columnNames(statement)
        if let shape = shapes[sql], shape.names == names { return shape.slot }
        if let old = shapes[sql] { opsh_unref(state, old.slot) }
        let slot = makeShape(names, dates: DeclaredTimeColumns.ofSQLiteStatement(statement), state: state)
        shapes[sql] = Shape(slot: slot, columnCount: Int32(names.count), names: names)
        return slot
    }

    /// Pushes the shape of rows with the given columns (for rows that do
    /// not come from a statement, e.g. repositories); `dates` says which
    /// hold seconds since 1970 (empty: none). The key must tell apart
    /// shapes whose dates differ.
    func push(columns names: [String], dates: [Bool] = [], key: String, state: OpaquePointer) -> Int32 {
        pushShape(slot(columns: names, dates: dates, key: key, state: state), state: state)
    }

    /// The registry slot of the shape of rows with the given columns.
    func slot(columns names: [String], dates: [Bool] = [], key: String, state: OpaquePointer) -> Int32 {
        if let shape = shapes[key], shape.columnCount == names.count {
            // Same count: the same columns for a repository's table.
            return shape.slot
        }
        if let old = shapes[key] { opsh_unref(state, old.slot) }
        let slot = makeShape(names, dates: dates, state: state)
        shapes[key] = Shape(slot: slot, columnCount: Int32(names.count), names: nil)
        return slot
    }

    private func pushShape(_ slot: Int32, state: OpaquePointer) -> Int32 {
        opsh_sql_push_shape(state, slot)
    }

    private func makeShape(_ names: [String], dates: [Bool], state: OpaquePointer) -> Int32 {
        let stack = LuaStack(state)
        lua_createtable(state, 3, 0)  // holder
        lua_createtable(state, Int32(names.count), 0)
        for (offset, name) in names.enumerated() {
            stack.push(name)
            lua_rawseti(state, -2, lua_Integer(offset + 1))
        }
        let namesIndex = lua_gettop(state)
        // The set of date columns, shared by both metatables (0: none).
        var datesIndex: Int32 = 0
        let dated = zip(names, dates).filter(\.1).map(\.0)
        if !dated.isEmpty {
            lua_createtable(state, 0, Int32(dated.count))
            for name in dated {
                lua_pushboolean(state, 1)
                stack.setField(name, at: -2)
            }
            datesIndex = lua_gettop(state)
        }
        // Row metatable.
        lua_createtable(state, 0, 4)
        stack.push("opsh.row")
        stack.setField("__name", at: -2)
        lua_pushvalue(state, namesIndex)
        stack.setField("columns", at: -2)
        if datesIndex != 0 {
            lua_pushvalue(state, datesIndex)
            stack.setField("dates", at: -2)
        }
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
        lua_createtable(state, 0, 3)
        stack.push("opsh.rows")
        stack.setField("__name", at: -2)
        lua_pushvalue(state, namesIndex)
        stack.setField("columns", at: -2)
        if datesIndex != 0 {
            lua_pushvalue(state, datesIndex)
            stack.setField("dates", at: -2)
            lua_rotate(state, datesIndex, -1)
            opsh_pop(state, 1)  // the set, below the metatables
        }
        // holder = {names, row, rows}
        lua_rawseti(state, namesIndex - 1, 3)
        lua_rawseti(state, namesIndex - 1, 2)
        lua_rawseti(state, namesIndex - 1, 1)
        return opsh_ref(state)
    }
}

extension RowShapes {
    /// Gives the plain table at `index` (a repository's record that is not
    /// a row: `config.get()`, an `audit.list()` entry) a metatable whose
    /// `dates` names the `fields` the schema declares as seconds since 1970
    /// in `table` (``DeclaredTimeColumns``), as a row's metatable does: the
    /// shell shows them as dates. Only the printer reads it.
    static func markDates(_ state: OpaquePointer, at index: Int32, table: String, fields: [String]) {
        let dated = fields.filter { DeclaredTimeColumns.contains(table: table, column: $0) }
        guard !dated.isEmpty, lua_checkstack(state, 4) != 0 else { return }
        let target = lua_absindex(state, index)
        let stack = LuaStack(state)
        lua_createtable(state, 0, 1)
        lua_createtable(state, 0, Int32(dated.count))
        for name in dated {
            lua_pushboolean(state, 1)
            stack.setField(name, at: -2)
        }
        stack.setField("dates", at: -2)
        lua_setmetatable(state, target)
    }
}

extension RowShapes {
    /// Per name of `columns`: whether the metatable of the row at `index`
    /// marks it as a date (its `dates`), for a shape made from that row's.
    static func dates(ofRowAt index: Int32, columns: [String], state: OpaquePointer) -> [Bool] {
        guard lua_checkstack(state, 4) != 0, lua_getmetatable(state, index) != 0 else { return [] }
        defer { opsh_pop(state, 1) }
        LuaStack(state).push("dates")
        defer { opsh_pop(state, 1) }
        guard lua_rawget(state, -2) == LUA_TTABLE else { return [] }
        return columns.map { name in
            LuaStack(state).push(name)
            defer { opsh_pop(state, 1) }
            return lua_rawget(state, -2) == LUA_TBOOLEAN
        }
    }
}

extension RowShapes {
    /// The key rows made from values keep their shape under
    /// (``StoreValuePusher``, ``WireRowPusher``, a query key's rows), so
    /// that all give the same columns the same metatables; the time
    /// columns' places after the names when there are any (`createdAt AS
    /// latest` and `42 AS latest` share names, not a shape).
    static func valueKey(_ names: [String], dates: [Bool] = []) -> String {
        let key = "opsh.value:" + names.joined(separator: "\u{1F}")
        guard dates.contains(true) else { return key }
        return key + "\u{1E}" + dates.map { $0 ? "d" : "-" }.joined()
    }
}
