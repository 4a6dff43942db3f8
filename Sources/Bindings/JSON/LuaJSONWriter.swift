import CLuaShim
import Foundation
import LuaRuntime
import Store
import TextCodec

/// Writes the Lua value at a stack index as JSON text, reading the stack
/// directly (raw access only, no metamethod runs), so that `db.NULL` and
/// the empty-object marker keep their identity.
///
/// The mapping (also `help("json.encode")`):
/// - `nil` (top level only) and `db.NULL` (= `json.null`) → `null`;
/// - integers → integers, floats → numbers with a `.` or an exponent
///   (`5.0`), so `json.decode(json.encode(x))` keeps the Lua subtype;
///   NaN and infinities are refused;
/// - strings → strings (they must be valid UTF-8);
/// - a table whose keys are exactly 1…n → an array; string keys → an
///   object with its keys sorted; the empty table → `[]`, except one
///   marked by `json.object()` (or decoded from `{}`), or a row of
///   `db.query` → `{}`;
/// - a row of `db.query` (and of the repositories) → an object with its
///   columns in the query's order, NULL columns as `null`, then any field a
///   script added, sorted;
/// - mixed, sparse or non-string keys, functions, userdata, cycles →
///   an error naming where (`$.a[2]`).
///
/// It is the one Lua → JSON writer: `json.encode`, JSON columns written
/// from Lua tables, `--json` and the shell's `.mode json` all use it
/// (``display(_:at:place:)`` for the last two, which only adds what a
/// screen needs: secrets masked, a table mixing items and fields shown
/// as an object).
public struct LuaJSONWriter {
    public struct Failure: Error, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    let state: OpaquePointer
    /// `db.NULL` and blobs by identity; nil: by their metatables' names
    /// (the shell, which does not hold the `db` module's markers).
    let markers: SQLMarkers?
    var pretty = false
    /// Columns whose schema default is `'{}'` write an empty table as `{}`.
    var emptyTableIsObject = false
    /// The screen's rules (`.mode json`, `--json`): values of fields that
    /// hold secrets masked (``SecretMask``), and a table that mixes items
    /// and fields written as an object whose item keys are "1", "2", …
    var forDisplay = false

    private var output: [UInt8] = []
    private var visiting: Set<UnsafeRawPointer> = []

    init(state: OpaquePointer, markers: SQLMarkers?, pretty: Bool = false, emptyTableIsObject: Bool = false) {
        self.state = state
        self.markers = markers
        self.pretty = pretty
        self.emptyTableIsObject = emptyTableIsObject
    }

    /// JSON text of the value at `index` the way the shell shows it
    /// (`.mode json`, `--json`): `json.encode`'s rule with secrets masked
    /// and mixed tables as objects. `place` names the value in errors
    /// (`$`, `$[2]`).
    public static func display(_ state: OpaquePointer, at index: Int32, place: String) throws -> String {
        var writer = LuaJSONWriter(state: state, markers: nil)
        writer.forDisplay = true
        return try writer.encode(at: index, place: place)
    }

    /// The registry field of the metatable marking an empty table as a
    /// JSON object.
    static let objectMarkerKey = "opsh.json.object"

    /// JSON text of the value at `index`.
    mutating func encode(at index: Int32, place: String = "$") throws -> String {
        output.removeAll(keepingCapacity: true)
        visiting.removeAll()
        let absolute = lua_absindex(state, index)
        try write(at: absolute, path: place, depth: 0)
        return String(decoding: output, as: UTF8.self)
    }

    private func isNull(_ index: Int32) -> Bool {
        if let markers { return markers.isNull(state, index) }
        return metatableName(index) == "opsh.NULL"
    }

    private func isBlob(_ index: Int32) -> Bool {
        if let markers { return markers.isBlob(state, index) }
        return metatableName(index) == "opsh.blob"
    }

    /// The `__name` of the value's metatable, read raw.
    private func metatableName(_ index: Int32) -> String? {
        guard lua_getmetatable(state, index) != 0 else { return nil }
        defer { opsh_pop(state, 1) }
        LuaStack(state).push("__name")
        lua_rawget(state, -2)
        defer { opsh_pop(state, 1) }
        return lua_type(state, -1) == LUA_TSTRING ? LuaStack(state).string(at: -1) : nil
    }

    /// A row's column names in the query's order (its metatable's
    /// `columns`), or nil when the table is not a row.
    private func rowColumns(_ index: Int32) -> [String]? {
        guard metatableName(index) == "opsh.row", lua_getmetatable(state, index) != 0 else { return nil }
        defer { opsh_pop(state, 1) }
        LuaStack(state).push("columns")
        guard lua_rawget(state, -2) == LUA_TTABLE else { opsh_pop(state, 1); return nil }
        defer { opsh_pop(state, 1) }
        var names: [String] = []
        var position: lua_Integer = 1
        while lua_rawgeti(state, -1, position) == LUA_TSTRING {
            names.append(LuaStack(state).string(at: -1) ?? "")
            opsh_pop(state, 1)
            position += 1
        }
        opsh_pop(state, 1)
        return names
    }

    private mutating func append(_ text: String) {
        output.append(contentsOf: text.utf8)
    }

    private mutating func newline(_ depth: Int) {
        guard pretty else { return }
        output.append(UInt8(ascii: "\n"))
        output.append(contentsOf: repeatElement(UInt8(ascii: " "), count: depth * 2))
    }

    private mutating func write(at index: Int32, path: String, depth: Int, secret: Bool = false) throws {
        guard depth <= 200 else { throw Failure(message: "nesting deeper than 200 levels at \(path)") }
        switch lua_type(state, index) {
        case LUA_TNIL:
            append("null")
        case LUA_TBOOLEAN:
            append(lua_toboolean(state, index) != 0 ? "true" : "false")
        case LUA_TNUMBER:
            if lua_isinteger(state, index) != 0 {
                append(String(opsh_tointeger(state, index, nil)))
            } else {
                let number = opsh_tonumber(state, index, nil)
                guard number.isFinite else {
                    throw Failure(message: JSONRule.nonFinite(number, at: path))
                }
                append(JSONString.floatText(number))
            }
        case LUA_TSTRING:
            var length = 0
            guard let pointer = opsh_tostring(state, index, &length) else { append("\"\""); return }
            let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw Failure(message: JSONRule.invalidUTF8(at: path))
            }
            if secret {
                var masked = SecretMask.mask(text)
                masked.withUTF8 { JSONString.append(UnsafeRawBufferPointer($0), to: &output) }
            } else {
                JSONString.append(bytes, to: &output)
            }
        case LUA_TTABLE:
            if isNull(index) {
                append("null")
                return
            }
            if isBlob(index) {
                throw Failure(message: "cannot encode a blob at \(path)")
            }
            try writeTable(at: index, path: path, depth: depth)
        default:
            throw Failure(message: JSONRule.unencodable(LuaStack(state).typeName(at: index), at: path))
        }
    }

    private mutating func writeTable(at index: Int32, path: String, depth: Int) throws {
        guard let identity = lua_topointer(state, index) else { return }
        guard !visiting.contains(identity) else {
            throw Failure(message: "cannot encode a table that contains itself at \(path)")
        }
        visiting.insert(identity)
        defer { visiting.remove(identity) }
        _ = lua_checkstack(state, 6)
        if let columns = rowColumns(index) {
            try writeRow(at: index, columns: columns, path: path, depth: depth)
            return
        }

        // Sort the keys out: 1…n, or strings.
        var count = 0
        var maxIndex: lua_Integer = 0
        var integerKeys = 0
        var names: [String] = []
        var badKey: String?
        lua_pushnil(state)
        while lua_next(state, index) != 0 {
            count += 1
            switch lua_type(state, -2) {
            case LUA_TNUMBER where lua_isinteger(state, -2) != 0:
                let key = opsh_tointeger(state, -2, nil)
                if key >= 1 { integerKeys += 1; maxIndex = max(maxIndex, key) } else { badKey = badKey ?? "number key \(key)" }
            case LUA_TSTRING:
                var length = 0
                let pointer = opsh_tostring(state, -2, &length)
                let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
                guard let name = String(validating: bytes, as: UTF8.self) else {
                    opsh_pop(state, 2)
                    throw Failure(message: "cannot encode a key that is not valid UTF-8 in the table at \(path)")
                }
                names.append(name)
            default:
                badKey = badKey ?? "\(LuaStack(state).typeName(at: -2)) key"
            }
            opsh_pop(state, 1)
        }
        if let badKey {
            throw Failure(message: "cannot encode the table at \(path): it has a \(badKey) (JSON object keys are strings, arrays have keys 1…n)")
        }
        if count == 0 {
            append(isObjectMarked(at: index) ? "{}" : "[]")
            return
        }
        if integerKeys > 0 && !names.isEmpty {
            guard forDisplay, maxIndex == lua_Integer(integerKeys) else {
                throw Failure(message: "cannot encode the table at \(path): it mixes array items (1…n) and named fields")
            }
            try writeObject(at: index, fields: Self.sorted(names), path: path, depth: depth, itemCount: maxIndex)
            return
        }
        if integerKeys > 0 {
            guard maxIndex == lua_Integer(integerKeys) else {
                throw Failure(message: "cannot encode the table at \(path): its keys are not 1…\(integerKeys) (a sparse array)")
            }
            output.append(UInt8(ascii: "["))
            for position in 1...maxIndex {
                if position > 1 { output.append(UInt8(ascii: ",")) }
                newline(depth + 1)
                lua_rawgeti(state, index, position)
                defer { opsh_pop(state, 1) }
                try write(at: lua_gettop(state), path: "\(path)[\(position)]", depth: depth + 1)
            }
            newline(depth)
            output.append(UInt8(ascii: "]"))
            return
        }
        try writeObject(at: index, fields: Self.sorted(names), path: path, depth: depth)
    }

    private static func sorted(_ names: [String]) -> [String] {
        names.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
    }

    /// `{"a":…,"b":…}` with the fields in this order; a missing field
    /// (a NULL column) is `null`.
    private mutating func writeObject(at index: Int32, fields: [String], path: String, depth: Int,
                                      itemCount: lua_Integer = 0) throws {
        output.append(UInt8(ascii: "{"))
        var offset = 0
        func member(_ name: String) {
            if offset > 0 { output.append(UInt8(ascii: ",")) }
            offset += 1
            newline(depth + 1)
            var key = name
            key.withUTF8 { JSONString.append(UnsafeRawBufferPointer($0), to: &output) }
            append(pretty ? ": " : ":")
        }
        if itemCount > 0 {
            for position in 1...itemCount {
                member(String(position))
                lua_rawgeti(state, index, position)
                defer { opsh_pop(state, 1) }
                try write(at: lua_gettop(state), path: "\(path)[\(position)]", depth: depth + 1)
            }
        }
        for name in fields {
            member(name)
            LuaStack(state).push(name)
            lua_rawget(state, index)
            defer { opsh_pop(state, 1) }
            try write(at: lua_gettop(state), path: Self.path(path, field: name), depth: depth + 1,
                      secret: forDisplay && SecretMask.isSecret(name))
        }
        newline(depth)
        output.append(UInt8(ascii: "}"))
    }

    /// A row: its columns in the query's order (NULL as `null`), then the
    /// fields a script added, sorted.
    private mutating func writeRow(at index: Int32, columns: [String], path: String, depth: Int) throws {
        let known = Set(columns)
        var added: [String] = []
        lua_pushnil(state)
        while lua_next(state, index) != 0 {
            opsh_pop(state, 1)
            guard lua_type(state, -1) == LUA_TSTRING, let name = LuaStack(state).string(at: -1) else {
                let keyType = LuaStack(state).typeName(at: -1)
                opsh_pop(state, 1)
                throw Failure(message: "cannot encode the row at \(path): it has a \(keyType) key")
            }
            if !known.contains(name) { added.append(name) }
        }
        try writeObject(at: index, fields: columns + Self.sorted(added), path: path, depth: depth)
    }

    /// An empty table is an object when `json.object()` marked it, when it
    /// is a row (`opsh.row`), or for a column whose default is `{}`.
    private func isObjectMarked(at index: Int32) -> Bool {
        guard lua_getmetatable(state, index) != 0 else { return emptyTableIsObject }
        defer { opsh_pop(state, 1) }
        lua_getfield(state, opsh_registryindex(), Self.objectMarkerKey)
        let marked = lua_rawequal(state, -1, -2) != 0
        opsh_pop(state, 1)
        if marked { return true }
        LuaStack(state).push("__name")
        lua_rawget(state, -2)
        defer { opsh_pop(state, 1) }
        if lua_type(state, -1) == LUA_TSTRING, LuaStack(state).string(at: -1) == "opsh.row" { return true }
        return emptyTableIsObject
    }

    static func path(_ path: String, field: String) -> String { JSONRule.path(path, field: field) }
}
