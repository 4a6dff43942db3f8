import CLuaShim
import CSQLBridge
import GRDBSQLite
import LuaRuntime

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
        // Plain values by the same C code as the fast path's.
        var code: Int32 = SQLITE_OK
        if opsh_sql_bind_plain(state, statement, position, index, copy ? 1 : 0, &code) == 0 {
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

    /// The column names of a statement.
    static func columnNames(_ statement: OpaquePointer) -> [String] {
        (0..<sqlite3_column_count(statement)).map { String(cString: sqlite3_column_name(statement, $0)) }
    }
}
