import CLuaShim
import Foundation
import LuaRuntime
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
/// - mixed, sparse or non-string keys, functions, userdata, cycles →
///   an error naming where (`$.a[2]`).
struct LuaJSONWriter {
    struct Failure: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    let state: OpaquePointer
    let markers: SQLMarkers
    var pretty = false
    /// Columns whose schema default is `'{}'` write an empty table as `{}`.
    var emptyTableIsObject = false

    private var output: [UInt8] = []
    private var visiting: Set<UnsafeRawPointer> = []

    init(state: OpaquePointer, markers: SQLMarkers, pretty: Bool = false, emptyTableIsObject: Bool = false) {
        self.state = state
        self.markers = markers
        self.pretty = pretty
        self.emptyTableIsObject = emptyTableIsObject
    }

    /// The registry field of the metatable marking an empty table as a
    /// JSON object.
    static let objectMarkerKey = "opsh.json.object"

    /// JSON text of the value at `index`.
    mutating func encode(at index: Int32) throws -> String {
        output.removeAll(keepingCapacity: true)
        visiting.removeAll()
        let absolute = lua_absindex(state, index)
        try write(at: absolute, path: "$", depth: 0)
        return String(decoding: output, as: UTF8.self)
    }

    private mutating func append(_ text: String) {
        output.append(contentsOf: text.utf8)
    }

    private mutating func newline(_ depth: Int) {
        guard pretty else { return }
        output.append(UInt8(ascii: "\n"))
        output.append(contentsOf: repeatElement(UInt8(ascii: " "), count: depth * 2))
    }

    private mutating func write(at index: Int32, path: String, depth: Int) throws {
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
            guard String(validating: bytes, as: UTF8.self) != nil else {
                throw Failure(message: JSONRule.invalidUTF8(at: path))
            }
            JSONString.append(bytes, to: &output)
        case LUA_TTABLE:
            if markers.isNull(state, index) {
                append("null")
                return
            }
            if markers.isBlob(state, index) {
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
        _ = lua_checkstack(state, 4)

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
            throw Failure(message: "cannot encode the table at \(path): it mixes array items (1…n) and named fields")
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
        output.append(UInt8(ascii: "{"))
        for (offset, name) in names.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }).enumerated() {
            if offset > 0 { output.append(UInt8(ascii: ",")) }
            newline(depth + 1)
            var key = name
            key.withUTF8 { JSONString.append(UnsafeRawBufferPointer($0), to: &output) }
            append(pretty ? ": " : ":")
            LuaStack(state).push(name)
            lua_rawget(state, index)
            defer { opsh_pop(state, 1) }
            try write(at: lua_gettop(state), path: Self.path(path, field: name), depth: depth + 1)
        }
        newline(depth)
        output.append(UInt8(ascii: "}"))
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
