import CLuaShim
import CSQLBridge
import LuaRuntime
import Store

/// Binds a call's arguments to a prepared SQLite statement, on the paths
/// the C fast path (`CSQLBridge`) leaves to Swift: named parameters from a
/// table, `db.NULL` and `db.blob` markers, and the errors that explain a
/// wrong call. Plain values and rows go through the same C functions as
/// the fast path, so both follow one set of rules:
///
/// Lua → SQL: nil and `db.NULL` bind NULL, booleans 0/1, integers and
/// floats as themselves, strings as TEXT when they are UTF-8 and as BLOB
/// otherwise (or when wrapped by `db.blob`). SQL → Lua: NULL is nil (the
/// field is absent from the row), BLOB and TEXT are Lua strings,
/// byte-exact.
enum StatementBridge {
    /// Binds the call's arguments from `first` on: positional values, or
    /// one table of named values (`:name`, `@name`, `$name`) or of
    /// positional ones (an array). Every placeholder needs its value and
    /// every value its placeholder (``PlaceholderMismatch``, in the words
    /// PostgreSQL's side uses): a value with no placeholder is never
    /// ignored (`db.exec("DELETE FROM side", { id = 5 })` deleted every row).
    static func bind(_ statement: OpaquePointer, call: LuaCall, from first: Int32, markers: SQLMarkers,
                     copy: Bool = false) throws {
        let state = call.state
        let parameterCount = opsh_sqlite_parameter_count(statement)
        let given = max(0, call.argumentCount - first + 1)
        if given == 1, lua_type(state, first) == LUA_TTABLE, !markers.isMarker(state, first) {
            try bindTable(statement, call: call, index: first, parameterCount: parameterCount, markers: markers)
            return
        }
        guard given == parameterCount else {
            throw PlaceholderMismatch.count(placeholders: Int(parameterCount), given: Int(given), hint: nil, sql: sql(of: statement))
        }
        for position in 0..<parameterCount {
            try bindValue(statement, Int32(position + 1), state: state, index: first + position, call: call,
                          argument: first + position, markers: markers, copy: copy)
        }
    }

    private static func bindTable(_ statement: OpaquePointer, call: LuaCall, index: Int32, parameterCount: Int32,
                                  markers: SQLMarkers) throws {
        let state = call.state
        // The largest position a `?` or `?NNN` takes from the table's array.
        var positions: Int32 = 0
        for position in 1...max(1, parameterCount) where parameterCount > 0 {
            if let rawName = opsh_sqlite_parameter_name(statement, position), rawName.pointee != CChar(UInt8(ascii: "?")) {
                // ":id" → field "id"
                lua_pushstring(state, rawName + 1)
                lua_rawget(state, index)
                if lua_type(state, -1) == LUA_TNIL {
                    lua_settop(state, -2)
                    throw PlaceholderMismatch.missing(placeholder: String(cString: rawName), sql: sql(of: statement))
                }
            } else {
                positions = position
                if lua_rawgeti(state, index, lua_Integer(position)) == LUA_TNIL {
                    lua_settop(state, -2)
                    throw PlaceholderMismatch.missing(placeholder: "?\(position)", sql: sql(of: statement))
                }
            }
            defer { lua_settop(state, -2) }
            try bindValue(statement, position, state: state, index: lua_gettop(state), call: call,
                          argument: index, markers: markers, copy: true)
        }
        try checkEveryValueIsUsed(statement, call: call, index: index, positions: positions)
    }

    /// The table's values by position beyond `positions`, and its names no
    /// placeholder names, are refused.
    private static func checkEveryValueIsUsed(_ statement: OpaquePointer, call: LuaCall, index: Int32, positions: Int32) throws {
        let state = call.state
        let length = lua_rawlen(state, index)
        if length > positions {
            throw PlaceholderMismatch.tablePositions(placeholders: Int(positions), given: Int(length), hint: nil, sql: sql(of: statement))
        }
        var unused: [String] = []
        lua_pushnil(state)
        while lua_next(state, index) != 0 {
            defer { lua_settop(state, -2) }
            if lua_type(state, -2) == LUA_TSTRING {
                let name = LuaStack(state).string(at: -2) ?? ""
                if ![":", "@", "$"].contains(where: { opsh_sqlite_parameter_index(statement, $0 + name) > 0 }) {
                    unused.append(name)
                }
            } else if lua_isinteger(state, -2) == 0 || !(1...max(1, Int64(length))).contains(opsh_tointeger(state, -2, nil)) {
                unused.append("[" + (lua_isinteger(state, -2) != 0 ? String(opsh_tointeger(state, -2, nil)) : "a \(LuaStack(state).typeName(at: -2)) key") + "]")
            }
        }
        if !unused.isEmpty { throw PlaceholderMismatch.unusedNames(unused.sorted(), sql: sql(of: statement)) }
    }

    static func bindValue(_ statement: OpaquePointer, _ position: Int32, state: OpaquePointer, index: Int32,
                          call: LuaCall, argument: Int32, markers: SQLMarkers, copy: Bool) throws {
        if lua_type(state, index) == LUA_TNUMBER, lua_isinteger(state, index) == 0, opsh_tonumber(state, index, nil).isNaN {
            throw call.argumentError(argument, SQLValueReader.nanRefusal(label(statement, position)))
        }
        // Plain values by the same C code as the fast path's.
        var code: Int32 = OPSH_SQLITE_OK
        if opsh_sql_bind_plain(state, statement, position, index, copy ? 1 : 0, &code) == 0 {
            if markers.isNull(state, index) {
                code = opsh_sqlite_bind_null(statement, position)
            } else if let blobCode = markers.bindBlob(statement, position, state: state, index: index) {
                code = blobCode
            } else {
                throw call.argumentError(argument, "cannot bind a \(call.stack.typeName(at: index)) to SQL parameter \(label(statement, position)) (encode tables with json.encode)")
            }
        }
        if code != OPSH_SQLITE_OK {
            throw LuaCallError.message("cannot bind parameter \(label(statement, position)): \(String(cString: opsh_sqlite_errstr(code)))")
        }
    }

    /// `?2` or `:name`: parameter `position` as the statement writes it.
    static func label(_ statement: OpaquePointer, _ position: Int32) -> String {
        opsh_sqlite_parameter_name(statement, position).map { String(cString: $0) } ?? "?\(position)"
    }

    static func sql(of statement: OpaquePointer) -> String {
        opsh_sqlite_sql(statement).map { String(cString: $0) } ?? ""
    }

    /// The column names of a statement.
    static func columnNames(_ statement: OpaquePointer) -> [String] {
        (0..<opsh_sqlite_column_count(statement)).map { String(cString: opsh_sqlite_column_name(statement, $0)) }
    }
}
