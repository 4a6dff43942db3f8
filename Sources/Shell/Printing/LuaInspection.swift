import CLuaShim
import Foundation
import TextCodec

/// Reads Lua values for printing with raw access only: no metamethod (and
/// so no Lua error) ever runs inside a Swift frame, except a userdata's
/// `__tostring`, called protected (``describedByItself(_:)``).
struct LuaInspection {
    let state: OpaquePointer

    func type(_ index: Int32) -> Int32 { lua_type(state, index) }

    /// `__name` of the value's metatable (`opsh.rows`, `opsh.row`, …).
    func metatableName(_ index: Int32) -> String? {
        guard lua_getmetatable(state, index) != 0 else { return nil }
        defer { opsh_pop(state, 1) }
        lua_pushstring(state, "__name")
        defer { opsh_pop(state, 1) }
        guard lua_rawget(state, -2) == LUA_TSTRING else { return nil }
        return string(-1)
    }

    /// The `columns` array of an `opsh.rows` / `opsh.row` metatable.
    func metatableColumns(_ index: Int32) -> [String]? {
        guard lua_getmetatable(state, index) != 0 else { return nil }
        defer { opsh_pop(state, 1) }
        lua_pushstring(state, "columns")
        defer { opsh_pop(state, 1) }
        guard lua_rawget(state, -2) == LUA_TTABLE else { return nil }
        var names: [String] = []
        var position: lua_Integer = 1
        while lua_rawgeti(state, -1, position) == LUA_TSTRING {
            names.append(string(-1) ?? "")
            opsh_pop(state, 1)
            position += 1
        }
        opsh_pop(state, 1)
        return names
    }

    func string(_ index: Int32) -> String? {
        guard lua_type(state, index) == LUA_TSTRING else { return nil }
        var length = 0
        guard let pointer = opsh_tostring(state, index, &length) else { return nil }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
        }
    }

    /// The first `limit` bytes of a string (a character cut at the end is
    /// dropped), and whether that is all of it.
    func string(_ index: Int32, atMost limit: Int) -> (String, whole: Bool) {
        var length = 0
        guard lua_type(state, index) == LUA_TSTRING, let pointer = opsh_tostring(state, index, &length) else { return ("", true) }
        let count = min(length, limit)
        return pointer.withMemoryRebound(to: UInt8.self, capacity: count) { bytes in
            var end = count
            // Do not cut a UTF-8 sequence: back up to its first byte.
            if count < length { while end > 0 && (bytes[end] & 0xC0) == 0x80 { end -= 1 } }
            return (String(decoding: UnsafeBufferPointer(start: bytes, count: end), as: UTF8.self), count == length)
        }
    }

    /// The length in bytes of the string at `index`.
    func length(_ index: Int32) -> Int {
        var length = 0
        _ = opsh_tostring(state, index, &length)
        return length
    }

    func isInteger(_ index: Int32) -> Bool { lua_isinteger(state, index) != 0 }
    func integer(_ index: Int32) -> Int64 { opsh_tointeger(state, index, nil) }
    func number(_ index: Int32) -> Double { opsh_tonumber(state, index, nil) }

    /// A number as Lua writes it (`3`, `0.5`, `1.0`, `1e+100`, `inf`).
    func numberText(_ index: Int32) -> String {
        if isInteger(index) { return String(integer(index)) }
        lua_pushvalue(state, index)
        defer { opsh_pop(state, 1) }
        var length = 0
        guard let pointer = opsh_tostring(state, -1, &length) else { return String(number(index)) }
        return String(cString: pointer)
    }

    /// A value that is not a table or string, as `tostring` shows it
    /// without metamethods (`function: 0x…`, `true`).
    func plainText(_ index: Int32) -> String {
        switch lua_type(state, index) {
        case LUA_TNIL, LUA_TNONE: return "nil"
        case LUA_TBOOLEAN: return lua_toboolean(state, index) != 0 ? "true" : "false"
        case LUA_TNUMBER: return numberText(index)
        case LUA_TSTRING: return string(index) ?? ""
        default:
            // A handle that says what it is (a watch: `watch(SELECT …)`).
            if lua_type(state, index) == LUA_TUSERDATA, let text = describedByItself(index) { return VisibleText.of(text) }
            let name = metatableName(index) ?? String(cString: lua_typename(state, lua_type(state, index)))
            if name == "opsh.NULL" { return "NULL" }
            let address = lua_topointer(state, index).map { String(UInt(bitPattern: $0), radix: 16) } ?? "0"
            return "\(name): 0x\(address)"
        }
    }

    /// What the value's `__tostring` says, called protected (an error in
    /// it is not the printer's: nil then, and the name and address show).
    func describedByItself(_ index: Int32) -> String? {
        let value = lua_absindex(state, index)
        guard lua_checkstack(state, 4) != 0, lua_getmetatable(state, value) != 0 else { return nil }
        lua_pushstring(state, "__tostring")
        guard lua_rawget(state, -2) == LUA_TFUNCTION else {
            opsh_pop(state, 2)
            return nil
        }
        lua_pushvalue(state, value)
        let status = opsh_pcall(state, 1, 1)
        defer { opsh_pop(state, 2) }
        guard status == LUA_OK, lua_type(state, -1) == LUA_TSTRING else { return nil }
        return string(-1)
    }

    func identity(_ index: Int32) -> UnsafeRawPointer? { lua_topointer(state, index) }

    /// The keys of the table at `index`: the array part 1…n, then the other
    /// keys sorted (strings, then numbers, then the rest). Each key is
    /// handed to `body` with its value pushed on top of the stack.
    enum Key: Comparable {
        case position(Int64)
        case name(String)
        case number(Double)
        case other(String)

        static func < (left: Key, right: Key) -> Bool {
            func rank(_ key: Key) -> Int {
                switch key {
                case .position: return 0
                case .name: return 1
                case .number: return 2
                case .other: return 3
                }
            }
            switch (left, right) {
            case let (.position(a), .position(b)): return a < b
            case let (.name(a), .name(b)): return a < b
            case let (.number(a), .number(b)): return a < b
            case let (.other(a), .other(b)): return a < b
            default: return rank(left) < rank(right)
            }
        }
    }

    /// Counts the array part (1…n without holes) and collects the other
    /// keys, sorted. Keys that are neither strings nor numbers are listed
    /// by their text (they cannot be pushed back, so `value(of:)` skips them).
    func keys(of table: Int32, limit: Int = .max) -> (arrayCount: Int64, others: [Key], total: Int) {
        let table = lua_absindex(state, table)
        var arrayCount: Int64 = 0
        while lua_rawgeti(state, table, arrayCount + 1) != LUA_TNIL {
            opsh_pop(state, 1)
            arrayCount += 1
        }
        opsh_pop(state, 1)
        var others: [Key] = []
        var total = 0
        lua_pushnil(state)
        while lua_next(state, table) != 0 {
            total += 1
            opsh_pop(state, 1)
            switch lua_type(state, -1) {
            case LUA_TSTRING:
                others.append(.name(string(-1) ?? ""))
            case LUA_TNUMBER:
                if isInteger(-1) {
                    let position = integer(-1)
                    if position >= 1 && position <= arrayCount { continue }
                    others.append(.number(Double(position)))
                } else {
                    others.append(.number(number(-1)))
                }
            default:
                others.append(.other(plainText(-1)))
            }
            if others.count > limit { lua_settop(state, lua_gettop(state) - 1); break }
        }
        return (arrayCount, others.sorted(), total)
    }

    /// Pushes `table[key]` (raw); returns false (nothing pushed) for a key
    /// that cannot be looked up again.
    func pushValue(of table: Int32, key: Key) -> Bool {
        let table = lua_absindex(state, table)
        switch key {
        case let .position(position): lua_rawgeti(state, table, position)
        case let .name(name):
            LuaInspection.pushString(state, name)
            lua_rawget(state, table)
        case let .number(number):
            if let exact = Int64(exactly: number) { lua_rawgeti(state, table, exact) } else {
                lua_pushnumber(state, number)
                lua_rawget(state, table)
            }
        case .other: return false
        }
        return true
    }

    static func pushString(_ state: OpaquePointer, _ text: String) {
        var text = text
        text.withUTF8 { buffer in
            _ = buffer.withMemoryRebound(to: CChar.self) { lua_pushlstring(state, $0.baseAddress, $0.count) }
        }
    }
}
