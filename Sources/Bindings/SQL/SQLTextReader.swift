import CLuaShim
import Glibc
import LuaRuntime
import Store

/// The SQL text of a `db` call on either engine: every byte of the Lua
/// string, or refused when it would run as other SQL than written
/// (``SQLText``: a NUL byte, bytes that are not UTF-8).
enum SQLTextReader {
    static func sql(_ call: LuaCall, _ index: Int32 = 1) throws -> String {
        guard lua_type(call.state, index) == LUA_TSTRING else { return try call.string(index) }
        var length = 0
        let pointer = opsh_tostring(call.state, index, &length)!
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        if memchr(pointer, 0, length) == nil, let text = String(validating: bytes, as: UTF8.self) { return text }
        try check(bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Throws why the SQL in `bytes` is refused, if it is.
    static func check(_ bytes: UnsafeRawBufferPointer) throws {
        if let reason = SQLText.refusal(bytes) { throw LuaCallError.message(reason) }
    }
}
