import CLuaShim
import GRDBSQLite
import LuaRuntime

/// Moves values between the Lua stack and a prepared SQLite statement,
/// straight through both C APIs: this is the hot path of `db.query`,
/// `db.exec` and `db.rows`, so no Swift value is built per column.
///
/// Lua → SQL: nil and `db.NULL` bind NULL, booleans 0/1, integers and
/// floats as themselves, strings as TEXT when they are UTF-8 and as BLOB
/// otherwise (or when wrapped by `db.blob`). SQL → Lua: NULL is nil (the
/// field is absent from the row), BLOB and TEXT are Lua strings,
/// byte-exact.
enum StatementBridge {
    /// `SQLITE_STATIC`: the bytes stay valid (on the Lua stack) until the
    /// statement is reset.
    static let staticBytes: sqlite3_destructor_type? = nil
    /// `SQLITE_TRANSIENT`: SQLite copies the bytes.
    static let transientBytes = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    /// Binds the call's arguments from `first` on: positional values, or
    /// one table of named values (`:name`, `@name`, `$name`) or of
    /// positional ones (an array).
    static func bind(_ statement: OpaquePointer, call: LuaCall, from first: Int32, markers: SQLMarkers,
                     copy: Bool = false) throws {
        let state = call.state
        let parameterCount = sqlite3_bind_parameter_count(statement)
        let given = max(0, call.argumentCount - first + 1)
        if given == 1, lua_type(state, first) == LUA_TTABLE, !markers.isMarker(state, first) {
            try bindTable(statement, call: call, index: first, parameterCount: parameterCount, markers: markers, copy: copy)
            return
        }
        guard given == parameterCount else {
            throw LuaCallError.message("the statement has \(parameterCount) parameter(s) but \(given) value(s) were given")
        }
        for position in 0..<parameterCount {
            try bindValue(statement, Int32(position + 1), state: state, index: first + position, call: call,
                          argument: first + position, markers: markers, copy: copy)
        }
    }

    private static func bindTable(_ statement: OpaquePointer, call: LuaCall, index: Int32, parameterCount: Int32,
                                  markers: SQLMarkers, copy: Bool) throws {
        let state = call.state
        for position in 1...max(1, parameterCount) where parameterCount > 0 {
            if let rawName = sqlite3_bind_parameter_name(statement, position) {
                // ":id" → field "id"
                lua_pushstring(state, rawName + 1)
                lua_rawget(state, index)
                if lua_type(state, -1) == LUA_TNIL {
                    let name = String(cString: rawName)
                    lua_settop(state, -2)
                    throw LuaCallError.message("no value for parameter \(name) in the table of parameters")
                }
            } else if lua_rawgeti(state, index, lua_Integer(position)) == LUA_TNIL {
                lua_settop(state, -2)
                throw LuaCallError.message("no value for parameter \(position) in the table of parameters (write NULL as db.NULL)")
            }
            defer { lua_settop(state, -2) }
            try bindValue(statement, position, state: state, index: lua_gettop(state), call: call,
                          argument: index, markers: markers, copy: true)
        }
    }

    static func bindValue(_ statement: OpaquePointer, _ position: Int32, state: OpaquePointer, index: Int32,
                          call: LuaCall, argument: Int32, markers: SQLMarkers, copy: Bool) throws {
        let code: Int32
        switch lua_type(state, index) {
        case LUA_TNIL, LUA_TNONE:
            code = sqlite3_bind_null(statement, position)
        case LUA_TBOOLEAN:
            code = sqlite3_bind_int64(statement, position, lua_toboolean(state, index) != 0 ? 1 : 0)
        case LUA_TNUMBER:
            if lua_isinteger(state, index) != 0 {
                code = sqlite3_bind_int64(statement, position, opsh_tointeger(state, index, nil))
            } else {
                code = sqlite3_bind_double(statement, position, opsh_tonumber(state, index, nil))
            }
        case LUA_TSTRING:
            var length = 0
            let bytes = opsh_tostring(state, index, &length)!
            let destructor = copy ? transientBytes : staticBytes
            if UTF8Check.isValid(bytes, length) {
                code = sqlite3_bind_text(statement, position, bytes, Int32(length), destructor)
            } else {
                code = sqlite3_bind_blob(statement, position, bytes, Int32(length), destructor)
            }
        default:
            if markers.isNull(state, index) {
                code = sqlite3_bind_null(statement, position)
            } else if let blobCode = markers.bindBlob(statement, position, state: state, index: index) {
                code = blobCode
            } else {
                throw call.argumentError(argument, "cannot bind a \(call.stack.typeName(at: index)) to SQL parameter \(position) (encode tables with json.encode)")
            }
        }
        if code != SQLITE_OK {
            throw LuaCallError.message("cannot bind parameter \(position): \(String(cString: sqlite3_errstr(code)))")
        }
    }

    /// Pushes the current row as a table: `columnNames` is the stack index
    /// of an array of the column names, `metatable` of the row metatable.
    @inline(__always)
    static func pushRow(_ statement: OpaquePointer, state: OpaquePointer, columnCount: Int32,
                        columnNames: Int32, metatable: Int32) {
        lua_createtable(state, 0, columnCount)
        for column in 0..<columnCount {
            let type = sqlite3_column_type(statement, column)
            if type == SQLITE_NULL { continue }
            lua_rawgeti(state, columnNames, lua_Integer(column + 1))
            pushColumn(statement, column, type: type, state: state)
            lua_rawset(state, -3)
        }
        lua_pushvalue(state, metatable)
        lua_setmetatable(state, -2)
    }

    @inline(__always)
    static func pushColumn(_ statement: OpaquePointer, _ column: Int32, type: Int32, state: OpaquePointer) {
        switch type {
        case SQLITE_INTEGER:
            lua_pushinteger(state, sqlite3_column_int64(statement, column))
        case SQLITE_FLOAT:
            lua_pushnumber(state, sqlite3_column_double(statement, column))
        case SQLITE_TEXT:
            let length = sqlite3_column_bytes(statement, column)
            if let text = sqlite3_column_text(statement, column) {
                text.withMemoryRebound(to: CChar.self, capacity: Int(length)) {
                    _ = lua_pushlstring(state, $0, Int(length))
                }
            } else {
                _ = lua_pushlstring(state, "", 0)
            }
        case SQLITE_BLOB:
            let length = sqlite3_column_bytes(statement, column)
            if let blob = sqlite3_column_blob(statement, column) {
                _ = lua_pushlstring(state, blob.assumingMemoryBound(to: CChar.self), Int(length))
            } else {
                _ = lua_pushlstring(state, "", 0)
            }
        default:
            lua_pushnil(state)
        }
    }

    /// The column names of a statement.
    static func columnNames(_ statement: OpaquePointer) -> [String] {
        (0..<sqlite3_column_count(statement)).map { String(cString: sqlite3_column_name(statement, $0)) }
    }
}

/// Validates UTF-8 without allocating (ASCII is the fast case).
enum UTF8Check {
    static func isValid(_ pointer: UnsafePointer<CChar>, _ length: Int) -> Bool {
        let bytes = UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self)
        var index = 0
        while index < length {
            let byte = bytes[index]
            if byte < 0x80 { index += 1; continue }
            let width: Int
            if byte & 0xE0 == 0xC0, byte >= 0xC2 { width = 2 }
            else if byte & 0xF0 == 0xE0 { width = 3 }
            else if byte & 0xF8 == 0xF0, byte <= 0xF4 { width = 4 }
            else { return false }
            guard index + width <= length else { return false }
            for offset in 1..<width where bytes[index + offset] & 0xC0 != 0x80 { return false }
            if width == 3 {
                let second = bytes[index + 1]
                if byte == 0xE0 && second < 0xA0 { return false }  // overlong
                if byte == 0xED && second >= 0xA0 { return false }  // surrogates
            }
            if width == 4 {
                let second = bytes[index + 1]
                if byte == 0xF0 && second < 0x90 { return false }
                if byte == 0xF4 && second >= 0x90 { return false }
            }
            index += width
        }
        return true
    }
}

