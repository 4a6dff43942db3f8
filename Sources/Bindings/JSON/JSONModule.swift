import CLuaShim
import LuaRuntime
import TextCodec

/// The `json` module.
///
/// ```lua
/// json.encode({ name = "app", tags = {"a", "b"}, n = 3 })  --> {"n":3,"name":"app","tags":["a","b"]}
/// json.encode(t, { pretty = true })                         -- two-space indentation
/// local t = json.decode('{"n": 3, "x": 1.5, "none": null}')
/// math.type(t.n) --> integer     t.none == json.null --> true
/// json.encode(json.object())  --> {}      json.encode({}) --> []
/// ```
///
/// Conventions:
/// - JSON `null` decodes to `json.null`, which **is** `db.NULL`: a decoded
///   document passed as a row writes NULL where it had null, and arrays
///   keep their positions. `json.null` encodes back to `null`.
/// - Integers stay integers (`3` ↔ `3`), floats stay floats (`3.0` ↔
///   `3.0`); integers beyond 64 bits decode as floats.
/// - The empty table encodes as `[]`. For an empty object use
///   `json.object()` (or `json.object(t)` to mark a table); `{}` decoded
///   comes back marked, so it encodes as `{}` again. Object keys are
///   written sorted.
/// - Errors say where: `json.decode: invalid JSON at line 1, column 7: …`,
///   `json.encode: cannot encode a function at $.handler`.
enum JSONModule {
    /// Registry field holding `db.NULL`, the value JSON null decodes to.
    static let nullKey = "opsh.NULL"

    static func install(in session: OpshSession) {
        install(runtime: session.runtime, markers: session.markers)
    }

    /// Installs `json` in `runtime`, whose `db.NULL` is already set.
    static func install(runtime: LuaRuntime, markers: SQLMarkers) {
        let state = runtime.state
        // db.NULL, kept where decoding finds it.
        lua_getglobal(state, "db")
        lua_getfield(state, -1, "NULL")
        lua_setfield(state, opsh_registryindex(), nullKey)
        opsh_pop(state, 1)
        // The metatable marking a table as a JSON object.
        lua_createtable(state, 0, 1)
        runtime.stack.push("opsh.json.object")
        lua_setfield(state, -2, "__name")
        lua_setfield(state, opsh_registryindex(), LuaJSONWriter.objectMarkerKey)

        runtime.register(module: "json", [
            "encode": { call in
                guard call.argumentCount >= 1 else { throw call.typeError(1, expected: "value") }
                var pretty = false
                if !call.isNoneOrNil(2) {
                    let options = try call.table(2)
                    for name in options.keys.sorted() where name != "pretty" {
                        throw call.argumentError(2, "unknown option '\(name)' (options: pretty)")
                    }
                    if let value = options["pretty"], value != .nil {
                        guard case let .boolean(flag) = value else {
                            throw call.argumentError(2, "pretty: boolean expected, got \(value.typeName)")
                        }
                        pretty = flag
                    }
                }
                var writer = LuaJSONWriter(state: call.state, markers: markers, pretty: pretty)
                do {
                    return call.results(.string(try writer.encode(at: 1)))
                } catch let failure as LuaJSONWriter.Failure {
                    throw LuaCallError.message("json.encode: \(failure.message)")
                }
            },
            "decode": { call in
                let bytes = try call.bytes(1)
                do {
                    let node = try JSONParser.parse(bytes)
                    push(node, state: call.state)
                    return 1
                } catch let failure as JSONParser.Failure {
                    throw LuaCallError.message("json.decode: \(failure)")
                }
            },
            "object": { call in
                if call.isNoneOrNil(1) {
                    lua_createtable(call.state, 0, 0)
                } else {
                    guard lua_type(call.state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
                    lua_settop(call.state, 1)
                }
                lua_getfield(call.state, opsh_registryindex(), LuaJSONWriter.objectMarkerKey)
                lua_setmetatable(call.state, -2)
                return 1
            },
        ])
        // json.null = db.NULL
        lua_getglobal(state, "json")
        lua_getfield(state, opsh_registryindex(), nullKey)
        lua_setfield(state, -2, "null")
        opsh_pop(state, 1)
    }

    /// Pushes a parsed document: null as `db.NULL`, empty objects marked.
    static func push(_ node: JSON, state: OpaquePointer) {
        _ = lua_checkstack(state, 4)
        switch node {
        case .null:
            lua_getfield(state, opsh_registryindex(), nullKey)
        case let .bool(flag):
            lua_pushboolean(state, flag ? 1 : 0)
        case let .integer(value):
            lua_pushinteger(state, value)
        case let .real(value):
            lua_pushnumber(state, value)
        case let .string(text):
            LuaStack(state).push(text)
        case let .array(elements):
            lua_createtable(state, Int32(clamping: elements.count), 0)
            for (offset, element) in elements.enumerated() {
                push(element, state: state)
                lua_rawseti(state, -2, lua_Integer(offset + 1))
            }
        case let .object(members):
            lua_createtable(state, 0, Int32(clamping: members.count))
            if members.isEmpty {
                lua_getfield(state, opsh_registryindex(), LuaJSONWriter.objectMarkerKey)
                lua_setmetatable(state, -2)
            }
            for (key, value) in members {
                LuaStack(state).push(key)
                push(value, state: state)
                lua_rawset(state, -3)
            }
        }
    }
}
