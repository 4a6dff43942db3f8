import CLuaShim
import CSQLBridge
import Glibc
import LuaRuntime
import Store

/// The rules by which a Lua value becomes an SQL parameter, on every
/// engine: nil and `db.NULL` are NULL, booleans 1 and 0, integers stay
/// integers, valid UTF-8 is text and other bytes (or `db.blob(s)`) a blob;
/// a table is refused (JSON is encoded by the script). PostgreSQL's `db`
/// module reads its values here; SQLite's binds them in C
/// (`opsh_sql_bind_plain`, through ``StatementBridge``) by the same rules,
/// and refuses with the same words (``nanRefusal(_:)``).
///
/// What an engine cannot store as given is refused, naming the value
/// (issue 24): NaN on both (SQLite would store NULL, PostgreSQL NaN), and
/// on PostgreSQL text with a NUL byte or bytes that are not UTF-8, which
/// SQLite keeps (``SQLDialect/textKeepsAnyBytes``).
enum SQLValueReader {
    /// - parameter label: the value's placeholder (`?2`, `:name`), for messages.
    /// (Made only for a message: a loop of writes binds millions of values.)
    static func value(_ call: LuaCall, _ index: Int32, argument: Int32, label makeLabel: @autoclosure () -> String, markers: SQLMarkers,
                      dialect: SQLDialect) throws -> StoreValue {
        let state = call.state
        switch lua_type(state, index) {
        case LUA_TNIL, LUA_TNONE:
            return .null
        case LUA_TBOOLEAN:
            return .integer(lua_toboolean(state, index) != 0 ? 1 : 0)
        case LUA_TNUMBER:
            if lua_isinteger(state, index) != 0 { return .integer(opsh_tointeger(state, index, nil)) }
            let number = opsh_tonumber(state, index, nil)
            if number.isNaN { throw call.argumentError(argument, nanRefusal(makeLabel())) }
            return .real(number)
        case LUA_TSTRING:
            var length = 0
            let bytes = opsh_tostring(state, index, &length)!
            let buffer = UnsafeRawBufferPointer(start: bytes, count: length)
            let isUTF8 = opsh_utf8_valid(bytes, length) != 0
            if !dialect.textKeepsAnyBytes, !isUTF8 || memchr(bytes, 0, length) != nil,
               let reason = dialect.refusal(ofTextBytes: buffer) {
                throw call.argumentError(argument, "value \(makeLabel()) \(reason): pass bytes as db.blob(s)")
            }
            if isUTF8 { return .text(String(decoding: buffer, as: UTF8.self)) }
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
            throw call.argumentError(argument, "cannot bind a \(call.stack.typeName(at: index)) to SQL parameter \(makeLabel()) (encode tables with json.encode)")
        }
    }

    /// Why NaN is no SQL value: the engines store it differently.
    static func nanRefusal(_ label: String) -> String {
        "value \(label) is NaN (not a number), which SQLite stores as NULL and PostgreSQL as NaN: write db.NULL or a number"
    }
}
