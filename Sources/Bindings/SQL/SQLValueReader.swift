import CLuaShim
import CSQLBridge
import LuaRuntime
import Store

/// The one set of rules by which a Lua value becomes an SQL parameter, on
/// every engine (``StatementArgumentsReader`` for GRDB's statements,
/// ``PostgresDatabaseModule`` for PostgreSQL's): nil and `db.NULL` are
/// NULL, booleans 1 and 0, integers stay integers, valid UTF-8 is text and
/// other bytes (or `db.blob(s)`) a blob; a table is refused (JSON is
/// encoded by the script). The C fast path (`StatementBridge`) binds by
/// the same rules.
enum SQLValueReader {
    static func value(_ call: LuaCall, _ index: Int32, argument: Int32, markers: SQLMarkers) throws -> StoreValue {
        let state = call.state
        switch lua_type(state, index) {
        case LUA_TNIL, LUA_TNONE:
            return .null
        case LUA_TBOOLEAN:
            return .integer(lua_toboolean(state, index) != 0 ? 1 : 0)
        case LUA_TNUMBER:
            if lua_isinteger(state, index) != 0 { return .integer(opsh_tointeger(state, index, nil)) }
            return .real(opsh_tonumber(state, index, nil))
        case LUA_TSTRING:
            var length = 0
            let bytes = opsh_tostring(state, index, &length)!
            let buffer = UnsafeRawBufferPointer(start: bytes, count: length)
            if opsh_utf8_valid(bytes, length) != 0 { return .text(String(decoding: buffer, as: UTF8.self)) }
            return .blob([UInt8](buffer))
        default:
            if markers.isNull(state, index) { return .null }
            if markers.isBlob(state, index) {
                lua_rawgeti(state, index, 1)
                defer { opsh_pop(state, 1) }
                var length = 0
                guard let bytes = opsh_tostring(state, -1, &length) else { return .null }
                return .blob([UInt8](UnsafeRawBufferPointer(start: bytes, count: length)))
            }
            throw call.argumentError(argument, "cannot bind a \(call.stack.typeName(at: index)) to an SQL parameter (encode tables with json.encode)")
        }
    }
}
