import CLuaShim
import TextCodec

/// A Swift function callable from Lua. It reads its arguments from `call`,
/// pushes its results and returns how many it pushed. Throwing makes the
/// Lua caller fail with the error's description, prefixed by the caller's
/// `chunk:line:`; no Lua error ever unwinds the Swift frame.
public typealias LuaHostFunction = (LuaCall) throws -> Int32

/// One call of a host function: its arguments, checked the way Lua's own
/// library checks them, and the stack to push results on.
public struct LuaCall {
    /// The stack of the calling Lua thread (a coroutine's, maybe).
    public let stack: LuaStack
    /// The name in error messages: `bad argument #1 to 'query'`.
    public let name: String
    unowned(unsafe) let runtime: LuaRuntime

    public var state: OpaquePointer { stack.state }
    /// How many arguments the caller passed.
    public let argumentCount: Int32

    init(state: OpaquePointer, name: String, runtime: LuaRuntime, references: LuaReferenceTable) {
        self.stack = LuaStack(state, references: references)
        self.name = name
        self.runtime = runtime
        self.argumentCount = lua_gettop(state)
    }

    /// The same call after its host function replaced the stack with
    /// other arguments (a repository passing SQL and values on to the `db`
    /// module's machinery): the arguments are the stack as it is now.
    public func withStackAsArguments() -> LuaCall {
        LuaCall(state: state, name: name, runtime: runtime, references: stack.references!)
    }

    // MARK: Errors

    /// `bad argument #index to 'name' (detail)`.
    public func argumentError(_ index: Int32, _ detail: String) -> LuaCallError {
        .badArgument(index, function: name, detail: detail)
    }

    /// `bad argument #index to 'name' (T expected, got U)`.
    public func typeError(_ index: Int32, expected: String) -> LuaCallError {
        let got = index > argumentCount ? "no value" : stack.typeName(at: index)
        return argumentError(index, "\(expected) expected, got \(got)")
    }

    // MARK: Arguments

    public func type(_ index: Int32) -> LuaType { stack.type(at: index) }
    public func isNoneOrNil(_ index: Int32) -> Bool { lua_type(state, index) <= 0 }

    /// The string (or number) at `index` as text: every byte of it, a NUL
    /// included. A string that is not UTF-8 is refused, naming the byte:
    /// decoded it would become other text (U+FFFD) behind the caller's
    /// back; ``bytes(_:)`` takes any bytes.
    public func string(_ index: Int32) throws -> String {
        guard lua_type(state, index) == LUA_TSTRING || lua_type(state, index) == LUA_TNUMBER else {
            throw typeError(index, expected: "string")
        }
        if lua_isinteger(state, index) != 0 { return String(opsh_tointeger(state, index, nil)) }
        if lua_type(state, index) == LUA_TNUMBER { return String(opsh_tonumber(state, index, nil)) }
        return try stack.text(at: index) { throw argumentError(index, "string is not valid UTF-8 (\($0))") }
    }

    public func optionalString(_ index: Int32) throws -> String? {
        isNoneOrNil(index) ? nil : try string(index)
    }

    public func bytes(_ index: Int32) throws -> [UInt8] {
        guard lua_type(state, index) == LUA_TSTRING else { throw typeError(index, expected: "string") }
        return stack.bytes(at: index) ?? []
    }

    public func integer(_ index: Int32) throws -> Int64 {
        var isNumber: Int32 = 0
        let number = opsh_tointeger(state, index, &isNumber)
        if isNumber != 0 { return number }
        if lua_type(state, index) == LUA_TNUMBER {
            throw argumentError(index, "number has no integer representation")
        }
        throw typeError(index, expected: "number")
    }

    public func optionalInteger(_ index: Int32) throws -> Int64? {
        isNoneOrNil(index) ? nil : try integer(index)
    }

    public func number(_ index: Int32) throws -> Double {
        guard lua_type(state, index) == LUA_TNUMBER else { throw typeError(index, expected: "number") }
        return opsh_tonumber(state, index, nil)
    }

    public func optionalNumber(_ index: Int32) throws -> Double? {
        isNoneOrNil(index) ? nil : try number(index)
    }

    public func boolean(_ index: Int32) -> Bool { lua_toboolean(state, index) != 0 }

    public func function(_ index: Int32) throws -> LuaReference {
        guard lua_type(state, index) == LUA_TFUNCTION else { throw typeError(index, expected: "function") }
        return stack.reference(at: index)
    }

    /// The value at `index`, converted deeply (errors name the argument).
    public func value(_ index: Int32) throws -> LuaValue {
        do {
            return try stack.value(at: index)
        } catch let error as LuaCallError {
            throw argumentError(index, error.description)
        }
    }

    /// A table argument as its fields (string keys only).
    public func table(_ index: Int32) throws -> [String: LuaValue] {
        guard lua_type(state, index) == LUA_TTABLE else { throw typeError(index, expected: "table") }
        switch try value(index) {
        case let .table(fields):
            var result: [String: LuaValue] = [:]
            for (key, element) in fields {
                guard let name = key.stringValue else {
                    throw argumentError(index, "table keys must be field names, got \(key.typeName) key")
                }
                result[name] = element
            }
            return result
        case .array:
            throw argumentError(index, "table of fields expected, got an array")
        default:
            return [:]
        }
    }

    /// The host object of type `T` at `index` (pushed with
    /// ``LuaRuntime/pushObject(_:type:methods:)``).
    public func object<T: AnyObject>(_ index: Int32, as _: T.Type, typeName: String) throws -> T {
        guard let context = typeName.withCString({ opsh_to_host_object(state, index, $0) }),
              let object = Unmanaged<AnyObject>.fromOpaque(context).takeUnretainedValue() as? T else {
            throw typeError(index, expected: typeName)
        }
        return object
    }

    // MARK: Results

    /// Pushes the values and returns their count: `return call.results(a, b)`.
    public func results(_ values: LuaValue...) -> Int32 {
        for value in values { stack.push(value) }
        return Int32(values.count)
    }

    /// Calls a Lua function on the calling thread (for callbacks). The
    /// error, if any, is thrown as is, so it keeps its `chunk:line`.
    public func call(_ function: LuaReference, _ arguments: [LuaValue], results: Int32 = 0) throws -> [LuaValue] {
        try runtime.call(function, arguments, on: state, results: results)
    }

    /// The runtime this call runs in.
    public var host: LuaRuntime { runtime }
}

/// What Lua holds for a host function: its name and body.
final class HostFunctionBox {
    let name: String
    let body: LuaHostFunction
    unowned(unsafe) let runtime: LuaRuntime
    /// The runtime's, kept here so a call does not go through `runtime`.
    let references: LuaReferenceTable

    /// `unowned(unsafe)`: Lua owns the box and the runtime owns Lua, so the
    /// runtime outlives every call of it.
    init(name: String, body: @escaping LuaHostFunction, runtime: LuaRuntime) {
        self.name = name
        self.body = body
        self.runtime = runtime
        self.references = runtime.references
    }
}

/// The trampoline's way into Swift. It runs the host function and turns
/// a thrown error into a status: the C side raises the Lua error after
/// this frame has returned.
let hostDispatch: opsh_host_function = { state, context in
    guard let state, let context else { return 0 }
    // Lua holds the box for as long as the function exists: no retain.
    return Unmanaged<HostFunctionBox>.fromOpaque(context)._withUnsafeGuaranteedRef { box in
        let call = LuaCall(state: state, name: box.name, runtime: box.runtime, references: box.references)
        do {
            return try box.body(call)
        } catch let error as LuaError {
            // Raised by Lua code this function called back: the same value
            // goes on to the caller (it already says where).
            if !box.runtime.pushErrorValue(of: error, on: state) { call.stack.push(error.message) }
            return OPSH_RAISE_VALUE
        } catch {
            call.stack.push(String(describing: error))
            return OPSH_RAISE
        }
    }
}

let hostRelease: opsh_host_release = { context in
    guard let context else { return }
    Unmanaged<AnyObject>.fromOpaque(context).release()
}
