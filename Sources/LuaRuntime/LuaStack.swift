import CLuaShim
import Glibc
import TextCodec

/// The Lua types, as `lua_type` numbers them.
public enum LuaType: Int32, Sendable {
    case none = -1
    case `nil` = 0
    case boolean = 1
    case lightUserdata = 2
    case number = 3
    case string = 4
    case table = 5
    case function = 6
    case userdata = 7
    case thread = 8

    public var name: String {
        switch self {
        case .none: return "no value"
        case .nil: return "nil"
        case .boolean: return "boolean"
        case .lightUserdata, .userdata: return "userdata"
        case .number: return "number"
        case .string: return "string"
        case .table: return "table"
        case .function: return "function"
        case .thread: return "thread"
        }
    }
}

/// A view of one Lua thread's stack: pushing Swift values and reading Lua
/// values. Only raw table access is used, so no metamethod (and no Lua
/// error) runs inside a Swift frame.
public struct LuaStack {
    public let state: OpaquePointer
    /// The runtime's; `unowned(unsafe)` because the runtime outlives every
    /// stack view (and this sits on the path of every host call).
    unowned(unsafe) let references: LuaReferenceTable?

    init(_ state: OpaquePointer, references: LuaReferenceTable?) {
        self.state = state
        self.references = references
    }

    /// A view of `state` for pushing and reading (references taken through
    /// it are only freed with the state: take them through ``LuaCall``).
    public init(_ state: OpaquePointer) {
        self.init(state, references: nil)
    }

    public var top: Int32 { lua_gettop(state) }

    public func type(at index: Int32) -> LuaType {
        LuaType(rawValue: lua_type(state, index)) ?? .none
    }

    /// The type name as Lua's error messages say it (`__name` of a host
    /// object's metatable included).
    public func typeName(at index: Int32) -> String {
        if lua_getmetatable(state, index) != 0 {
            defer { opsh_pop(state, 1) }
            push("__name")
            if lua_rawget(state, -2) == LUA_TSTRING {
                defer { opsh_pop(state, 1) }
                return string(at: -1) ?? "userdata"
            }
            opsh_pop(state, 1)
        }
        return type(at: index).name
    }

    // MARK: Pushing

    public func push(_ value: LuaValue) {
        switch value {
        case .nil: lua_pushnil(state)
        case let .boolean(flag): lua_pushboolean(state, flag ? 1 : 0)
        case let .integer(number): lua_pushinteger(state, number)
        case let .number(number): lua_pushnumber(state, number)
        case let .string(text): push(text)
        case let .bytes(bytes): push(bytes: bytes)
        case let .array(elements):
            lua_createtable(state, Int32(clamping: elements.count), 0)
            for (offset, element) in elements.enumerated() {
                push(element)
                lua_rawseti(state, -2, lua_Integer(offset + 1))
            }
        case let .table(fields):
            lua_createtable(state, 0, Int32(clamping: fields.count))
            for (key, element) in fields where key != .nil {
                push(key)
                push(element)
                lua_rawset(state, -3)
            }
        case let .reference(reference):
            _ = opsh_getref(state, reference.slot)
        }
    }

    public func push(_ text: String) {
        var text = text
        text.withUTF8 { buffer in
            _ = buffer.withMemoryRebound(to: CChar.self) { lua_pushlstring(state, $0.baseAddress, $0.count) }
        }
    }

    public func push(bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { buffer in
            _ = buffer.withMemoryRebound(to: CChar.self) { lua_pushlstring(state, $0.baseAddress, $0.count) }
        }
    }

    public func pushNil() { lua_pushnil(state) }
    /// Pushes global `name`.
    public func pushGlobal(_ name: String) { lua_getglobal(state, name) }
    public func push(_ number: Int64) { lua_pushinteger(state, number) }
    public func push(_ number: Int) { lua_pushinteger(state, lua_Integer(number)) }
    public func push(_ number: Double) { lua_pushnumber(state, number) }
    public func push(_ flag: Bool) { lua_pushboolean(state, flag ? 1 : 0) }
    public func pop(_ count: Int32 = 1) { opsh_pop(state, count) }

    /// Sets field `name` of the table at `index` (raw) to the value on top.
    public func setField(_ name: String, at index: Int32) {
        let table = lua_absindex(state, index)
        push(name)
        lua_rotate(state, -2, 1)
        lua_rawset(state, table)
    }

    // MARK: Reading

    /// The bytes of the string (or number) at `index`, without conversion
    /// of a number in place.
    public func bytes(at index: Int32) -> [UInt8]? {
        guard lua_type(state, index) == LUA_TSTRING else { return nil }
        var length = 0
        guard let pointer = opsh_tostring(state, index, &length) else { return nil }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            Array(UnsafeBufferPointer(start: $0, count: length))
        }
    }

    /// The string at `index` when it is one (decoded lossily if not UTF-8).
    public func string(at index: Int32) -> String? {
        guard lua_type(state, index) == LUA_TSTRING else { return nil }
        var length = 0
        guard let pointer = opsh_tostring(state, index, &length) else { return nil }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: length) {
            String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
        }
    }

    /// The string at `index` as text, every byte of it; when it is not
    /// UTF-8, what `refuse` throws for the first byte that is not.
    public func text(at index: Int32, refuse: (TextBytes.InvalidUTF8) throws -> Never) throws -> String {
        var length = 0
        guard lua_type(state, index) == LUA_TSTRING, let pointer = opsh_tostring(state, index, &length) else { return "" }
        let buffer = UnsafeRawBufferPointer(start: pointer, count: length)
        // Decoded with repair, then compared with the bytes: equal only
        // when they were valid UTF-8 (a repair writes U+FFFD where they
        // were not). A fifth of `String(validating:as:)`'s time, which
        // went through its generic path: most of reading a repository
        // row's text fields (issue 27).
        var text = String(decoding: buffer.assumingMemoryBound(to: UInt8.self), as: UTF8.self)
        let valid = text.utf8.count == length
            && text.withUTF8 { decoded in length == 0 || memcmp(decoded.baseAddress!, pointer, length) == 0 }
        guard valid else {
            try refuse(TextBytes.firstInvalidUTF8(buffer) ?? TextBytes.InvalidUTF8(offset: 0, byte: buffer.first ?? 0))
        }
        return text
    }

    /// The value at `index`, tables copied deeply.
    ///
    /// - throws: ``LuaCallError`` for a table that contains itself, or one
    ///   nested deeper than `maxDepth`.
    public func value(at index: Int32, maxDepth: Int = 100) throws -> LuaValue {
        // The tables being copied, outermost first: an array, not a Set,
        // because it is short (nesting depth) and a Set's storage type is
        // instantiated at run time with a protocol-conformance lookup: a
        // few percent of `opsh -e 'return 1'` in a profile.
        var path: [UnsafeRawPointer] = []
        return try value(at: lua_absindex(state, index), depth: maxDepth, path: &path)
    }

    private func value(at index: Int32, depth: Int, path: inout [UnsafeRawPointer]) throws -> LuaValue {
        switch lua_type(state, index) {
        case LUA_TNIL, LUA_TNONE:
            return .nil
        case LUA_TBOOLEAN:
            return .boolean(lua_toboolean(state, index) != 0)
        case LUA_TNUMBER:
            if lua_isinteger(state, index) != 0 { return .integer(opsh_tointeger(state, index, nil)) }
            return .number(opsh_tonumber(state, index, nil))
        case LUA_TSTRING:
            let bytes = self.bytes(at: index) ?? []
            if let text = String(validating: bytes, as: UTF8.self) { return .string(text) }
            return .bytes(bytes)
        case LUA_TTABLE:
            return try table(at: index, depth: depth, path: &path)
        default:
            return .reference(reference(at: index))
        }
    }

    private func table(at index: Int32, depth: Int, path: inout [UnsafeRawPointer]) throws -> LuaValue {
        guard let identity = lua_topointer(state, index) else { return .table([:]) }
        guard !path.contains(identity) else {
            throw LuaCallError.message("table refers to itself (a cycle cannot be converted)")
        }
        guard depth > 0 else {
            throw LuaCallError.message("table nested too deeply to convert")
        }
        guard lua_checkstack(state, 4) != 0 else {
            throw LuaCallError.message("table nested too deeply to convert (stack overflow)")
        }
        path.append(identity)
        defer { path.removeLast() }

        var fields: [LuaValue: LuaValue] = [:]
        lua_pushnil(state)
        while lua_next(state, index) != 0 {
            let key = try value(at: lua_absindex(state, -2), depth: depth - 1, path: &path)
            let element = try value(at: lua_absindex(state, -1), depth: depth - 1, path: &path)
            opsh_pop(state, 1)
            if case let .number(number) = key, let exact = Int64(exactly: number) {
                fields[.integer(exact)] = element  // Lua normalises 2.0 to 2 as a key
            } else {
                fields[key] = element
            }
        }
        // An array: keys exactly 1…n.
        let count = fields.count
        if count > 0 {
            var elements: [LuaValue] = []
            elements.reserveCapacity(count)
            for position in 1...count {
                guard let element = fields[.integer(Int64(position))] else { return .table(fields) }
                elements.append(element)
            }
            return .array(elements)
        }
        return .table(fields)
    }

    /// A registry reference to the value at `index`.
    public func reference(at index: Int32) -> LuaReference {
        let name = typeName(at: index)
        lua_pushvalue(state, index)
        let slot = opsh_ref(state)
        return LuaReference(slot: slot, typeName: name, owner: references ?? LuaReferenceTable())
    }
}
