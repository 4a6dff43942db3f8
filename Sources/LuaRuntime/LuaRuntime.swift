import CLuaShim
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// One Lua 5.4 state driven from Swift.
///
/// All calls happen on one thread at a time (opsh's Lua thread); only
/// ``interrupt(_:)`` may come from any thread. Swift enters Lua only
/// through protected calls, and Lua enters Swift only through the C
/// trampoline, so a Lua error never unwinds a Swift frame.
public final class LuaRuntime {
    public struct Options: Sendable {
        /// Bytes the state may hold; nil for no limit.
        public var memoryLimit: Int?
        /// Only the libraries that cannot reach the system: no `io`,
        /// `package`/`require`, `debug`, `os.execute`, `string.dump`,
        /// `load` of bytecode.
        public var sandbox: Bool

        public init(memoryLimit: Int? = nil, sandbox: Bool = false) {
            self.memoryLimit = memoryLimit
            self.sandbox = sandbox
        }
    }

    /// The main thread of the state.
    public let state: OpaquePointer
    public let options: Options
    let references = LuaReferenceTable()

    /// Protected calls in progress; an interrupt only counts while one is.
    private let running = Mutex(0)
    /// Numbers the error values kept by ``keepErrorValue(_:)``: only the
    /// newest is kept, and a host function re-raises it only while its
    /// number is still the newest.
    private(set) var errorValueSerial = 0
    static let errorValueKey = "opsh.errorValue"
    /// The end of the shim's message for results past the memory limit.
    static let resultsPastLimit = "bytes): what this call returned would pass it"
    /// Run when an interrupt arrives (e.g. `sqlite3_interrupt` for the
    /// statement a host function is waiting on). Any thread.
    private let interruptHandlers = Mutex<[@Sendable (LuaInterruptReason) -> Void]>([])
    /// Run on the Lua thread each time the outermost protected call
    /// returns: Lua is idle until the next one.
    private var idleHandlers: [() -> Void] = []
    /// Modules installed on first use and not used yet.
    var lazyModuleGroups: [LazyModuleGroup] = []

    public init(options: Options = Options()) throws {
        guard let state = opsh_newstate(0) else {
            throw LuaError(kind: .memory, message: "cannot create a Lua state: not enough memory")
        }
        self.state = state
        self.options = options
        opsh_set_host_dispatch(hostDispatch, hostRelease)
        opsh_openlibs(state, options.sandbox ? 1 : 0)
        installExit()
        if options.sandbox {
            // `load` compiles text only: bytecode can crash the VM.
            try execute("""
                local load, select = load, select
                _G.load = function(chunk, name, mode, ...)
                  if select('#', ...) > 0 then return load(chunk, name, 't', ...) end
                  return load(chunk, name, 't')
                end
                """, chunkName: "=(sandbox)")
        }
        if let limit = options.memoryLimit {
            opsh_set_memory_limit(state, max(limit, 0))
        }
    }

    deinit {
        opsh_close(state)
    }

    /// The stack of the main thread.
    public var stack: LuaStack { LuaStack(state, references: references) }

    /// Bytes the state holds.
    public var memoryUsed: Int { opsh_memory_used(state) }

    // MARK: Globals and modules

    /// Pushes a host function (owned by Lua from then on).
    public func pushFunction(_ name: String, _ body: @escaping LuaHostFunction, on state: OpaquePointer? = nil) {
        let box = HostFunctionBox(name: name, body: body, runtime: self)
        opsh_push_host_function(state ?? self.state, Unmanaged.passRetained(box).toOpaque())
    }

    /// Pushes a host function whose common case runs in C: `fastPath` is
    /// tried first and declines (``OPSH_DECLINE``) what it does not handle,
    /// which `body` then does. `data` must outlive the function.
    public func pushFunction(_ name: String, _ body: @escaping LuaHostFunction, fastPath: opsh_fast_path,
                             data: UnsafeMutableRawPointer?, on state: OpaquePointer? = nil) {
        let box = HostFunctionBox(name: name, body: body, runtime: self)
        opsh_push_host_function_fast(state ?? self.state, Unmanaged.passRetained(box).toOpaque(), fastPath, data)
    }

    /// Sets global `name` to a host function.
    public func register(_ name: String, _ body: @escaping LuaHostFunction) {
        pushFunction(name, body)
        lua_setglobal(state, name)
    }

    /// Adds functions to the global table `module` (created if missing).
    public func register(module: String, _ functions: [String: LuaHostFunction]) {
        if lua_getglobal(state, module) != LUA_TTABLE {
            opsh_pop(state, 1)
            lua_createtable(state, 0, Int32(functions.count))
            lua_pushvalue(state, -1)
            lua_setglobal(state, module)
        }
        for (name, body) in functions.sorted(by: { $0.key < $1.key }) {
            pushFunction(name, body)
            stack.setField(name, at: -2)
        }
        opsh_pop(state, 1)
    }

    public func setGlobal(_ name: String, _ value: LuaValue) {
        stack.push(value)
        lua_setglobal(state, name)
    }

    /// Sets global `name` to a table of strings at integer keys (the
    /// global `arg`), without the dictionary a ``LuaValue/table(_:)`` needs.
    public func setGlobal(_ name: String, strings: [(key: Int64, value: String)]) {
        lua_createtable(state, Int32(strings.count), 1)
        for (key, value) in strings {
            stack.push(value)
            lua_rawseti(state, -2, key)
        }
        lua_setglobal(state, name)
    }

    public func global(_ name: String) throws -> LuaValue {
        lua_getglobal(state, name)
        defer { opsh_pop(state, 1) }
        return try stack.value(at: -1)
    }

    /// Pushes `object` as a userdata whose methods are `methods` (called
    /// as `obj:name(...)`), with `__name` = `type`.
    ///
    /// The metatable is made once per `type`, by the first push: methods
    /// must take their object from argument 1 (``LuaCall/object(_:as:typeName:)``),
    /// never from a captured variable.
    public func pushObject(_ object: AnyObject, type: String, methods: [String: LuaHostFunction],
                           metamethods: [String: LuaHostFunction] = [:], on state: OpaquePointer? = nil) {
        let target = state ?? self.state
        let context = Unmanaged.passRetained(object).toOpaque()
        let created = type.withCString { opsh_push_host_object(target, context, $0) }
        if created != 0 {
            let stack = LuaStack(target, references: references)
            lua_createtable(target, 0, Int32(methods.count))
            for (name, body) in methods {
                pushFunction("\(name)", body, on: target)
                stack.setField(name, at: -2)
            }
            stack.setField("__index", at: -2)
            for (name, body) in metamethods {
                pushFunction(name, body, on: target)
                // A release runs as an interrupt unwinds past its value.
                if name == "__close" { opsh_run_despite_interrupt(target, -1) }
                stack.setField(name, at: -2)
            }
            opsh_pop(target, 1)
        }
    }

    /// Makes `require` look in `folder` first (`folder/?.lua`,
    /// `folder/?/init.lua`). Nothing in a sandbox, which has no `require`.
    public func prependModulePath(_ folder: String) {
        // (The sandbox pushes nothing: popping then took a value that was
        // not there, and every sandboxed script aborted.)
        guard !options.sandbox else { return }
        guard lua_getglobal(state, "package") == LUA_TTABLE else {
            opsh_pop(state, 1)
            return
        }
        lua_getfield(state, -1, "path")
        let current = stack.string(at: -1) ?? ""
        opsh_pop(state, 1)
        stack.push("\(folder)/?.lua;\(folder)/?/init.lua;\(current)")
        lua_setfield(state, -2, "path")
        opsh_pop(state, 1)
    }

    // MARK: Running code

    /// What compiling a piece of text gives.
    public enum Compilation {
        case compiled
        /// The text ends in the middle of a statement: read more.
        case incomplete
        case failed(LuaError)
    }

    /// Compiles `code` and leaves the function on the stack when it
    /// compiles (the REPL uses `.incomplete` to ask for another line).
    public func compile(_ code: String, chunkName: String) -> Compilation {
        drainReleasedReferences()
        var code = code
        let status = code.withUTF8 { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                opsh_load(state, chars.baseAddress, chars.count, chunkName, "t")
            }
        }
        if status == LUA_OK { return .compiled }
        defer { opsh_pop(state, 1) }
        if opsh_is_incomplete(state, status) != 0 { return .incomplete }
        let message = stack.string(at: -1) ?? "cannot compile"
        return .failed(LuaError(kind: status == LUA_ERRMEM ? .memory : .syntax, message: message))
    }

    /// Compiles and runs `code` with `arguments` as `...`; returns what it
    /// returns.
    @discardableResult
    public func execute(_ code: String, chunkName: String = "=(opsh)", arguments: [LuaValue] = []) throws -> [LuaValue] {
        switch compile(code, chunkName: chunkName) {
        case .compiled:
            return try callTop(arguments: arguments)
        case .incomplete:
            // Ask again to get Lua's own "<eof>" message.
            throw LuaError(kind: .syntax, message: incompleteMessage(code, chunkName: chunkName))
        case let .failed(error):
            throw error
        }
    }

    /// Runs the file at `path` with `arguments` as `...`.
    @discardableResult
    public func executeFile(_ path: String, chunkName: String? = nil, arguments: [LuaValue] = []) throws -> [LuaValue] {
        guard let data = FileBytes.read(path) else {
            throw LuaError(kind: .runtime, message: "cannot open \(path): \(FileBytes.lastError())")
        }
        let name = chunkName ?? "@\(path)"
        return try execute(Self.scriptText(data), chunkName: name, arguments: arguments)
    }

    /// A script file's text as `lua5.4` reads it: without a UTF-8
    /// byte-order mark, and with a first line starting with `#` (`#!`)
    /// made a comment (so line numbers stay right).
    public static func scriptText<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
        var text = bytes.starts(with: [0xEF, 0xBB, 0xBF])
            ? String(decoding: bytes.dropFirst(3), as: UTF8.self) : String(decoding: bytes, as: UTF8.self)
        if text.hasPrefix("#") { text = "--" + text }
        return text
    }

    /// Calls the compiled function on top of the stack.
    func callTop(arguments: [LuaValue]) throws -> [LuaValue] {
        try callTop(arguments: arguments) { stack, first, count in
            var results: [LuaValue] = []
            for index in stride(from: first, to: first + count, by: 1) {
                results.append((try? stack.value(at: index)) ?? .reference(stack.reference(at: index)))
            }
            return results
        }
    }

    /// Calls the compiled function on top of the stack and hands its
    /// results, still on the stack, to `body` (a printer that wants the
    /// metatables, say).
    func callTop<T>(arguments: [LuaValue], results body: (LuaStack, _ first: Int32, _ count: Int32) throws -> T) throws -> T {
        let base = lua_gettop(state) - 1
        defer { lua_settop(state, base) }
        // Room for every argument (and the traceback's handler): a script
        // run with many arguments wrote past Lua's stack without it.
        guard lua_checkstack(state, Int32(clamping: arguments.count) + 2) != 0 else {
            throw LuaError(kind: .runtime, message: "too many arguments for a chunk (\(arguments.count))")
        }
        for argument in arguments { stack.push(argument) }
        let status = protectedCall(state, arguments: Int32(arguments.count), results: LUA_MULTRET, traceback: true)
        if status != LUA_OK {
            throw error(status: status, state: state, traceback: true)
        }
        return try body(stack, base + 1, lua_gettop(state) - base)
    }

    /// Compiles and runs `code`, handing its results on the stack to
    /// `body`.
    /// `environment`, when given, is the chunk's `_ENV` instead of the
    /// globals (the shell's prompt locals, which outlive their chunk).
    public func execute<T>(_ code: String, chunkName: String, arguments: [LuaValue] = [], environment: LuaReference? = nil,
                           results body: (LuaStack, _ first: Int32, _ count: Int32) throws -> T) throws -> T {
        switch compile(code, chunkName: chunkName) {
        case .compiled:
            if let environment {
                _ = opsh_getref(state, environment.slot)
                _ = lua_setupvalue(state, -2, 1)
            }
            return try callTop(arguments: arguments, results: body)
        case .incomplete:
            throw LuaError(kind: .syntax, message: incompleteMessage(code, chunkName: chunkName))
        case let .failed(error):
            throw error
        }
    }

    /// Runs a chunk compiled before and kept (the shell keeps what a typed
    /// chunk compiled to, as `lua.c` does), handing its results on the
    /// stack to `body`; `environment` as in
    /// ``execute(_:chunkName:arguments:environment:results:)``.
    public func run<T>(compiled function: LuaReference, arguments: [LuaValue] = [], environment: LuaReference? = nil,
                       results body: (LuaStack, _ first: Int32, _ count: Int32) throws -> T) throws -> T {
        drainReleasedReferences()
        _ = opsh_getref(state, function.slot)
        if let environment {
            _ = opsh_getref(state, environment.slot)
            _ = lua_setupvalue(state, -2, 1)
        }
        return try callTop(arguments: arguments, results: body)
    }

    /// Calls a kept function from Swift (an event loop delivering a watch
    /// callback, say). Errors come back with `chunk:line` and a traceback.
    @discardableResult
    public func call(_ function: LuaReference, _ arguments: [LuaValue]) throws -> [LuaValue] {
        _ = opsh_getref(state, function.slot)
        return try callTop(arguments: arguments)
    }

    /// Calls a kept function on `thread` from inside a host function.
    func call(_ function: LuaReference, _ arguments: [LuaValue], on thread: OpaquePointer, results: Int32) throws -> [LuaValue] {
        let threadStack = LuaStack(thread, references: references)
        let base = lua_gettop(thread)
        guard lua_checkstack(thread, Int32(arguments.count) + 2) != 0 else {
            throw LuaCallError.message("stack overflow")
        }
        _ = opsh_getref(thread, function.slot)
        for argument in arguments { threadStack.push(argument) }
        let status = protectedCall(thread, arguments: Int32(arguments.count), results: results, traceback: false)
        defer { lua_settop(thread, base) }
        if status != LUA_OK { throw error(status: status, state: thread, traceback: false) }
        var values: [LuaValue] = []
        let top = lua_gettop(thread)
        if top > base {
            for index in (base + 1)...top { values.append(try threadStack.value(at: index)) }
        }
        return values
    }

    private func protectedCall(_ thread: OpaquePointer, arguments: Int32, results: Int32, traceback: Bool) -> Int32 {
        running.withLock { $0 += 1 }
        let status: Int32
        if traceback {
            status = opsh_pcall(thread, arguments, results)
        } else {
            status = lua_pcallk(thread, arguments, results, 0, 0, nil)
        }
        let outermost = running.withLock { count in
            count -= 1
            return count == 0
        }
        if outermost {
            // Take the interrupt now, or it would hit the next chunk.
            if status == LUA_OK, opsh_interrupt_reason(state) != 0 {
                opsh_clear_interrupt(state)
            }
            for handler in idleHandlers { handler() }
        }
        return status
    }

    private func error(status: Int32, state thread: OpaquePointer, traceback: Bool) -> LuaError {
        let threadStack = LuaStack(thread, references: references)
        let text = threadStack.string(at: -1) ?? "(error object is a \(threadStack.typeName(at: -1)) value)"
        let reason = opsh_interrupt_reason(state)
        let isOutermost = running.withLock { $0 == 0 }
        if reason != 0, let interruptReason = LuaInterruptReason(rawValue: reason) {
            if isOutermost { opsh_clear_interrupt(state) }
            if interruptReason == .exit {
                return LuaError(kind: .exit(exitStatus), message: "os.exit(\(exitStatus))")
            }
            var error = LuaError(kind: .interrupted(interruptReason), message: interruptMessage(interruptReason))
            error.note = interruptNote
            // A nested call's error is raised again outward: the note goes with the outermost.
            if isOutermost { interruptNote = nil }
            return error
        }
        // The shim raises the limit's error as a plain error when what a host
        // function returned passes the limit (opsh_lua.c,
        // keep_results_within_limit): it is a memory error all the same.
        let kind: LuaError.Kind = status == LUA_ERRMEM || text.contains(Self.resultsPastLimit) ? .memory : .runtime
        if status == LUA_ERRMEM {
            return LuaError(kind: .memory, message: "not enough memory (the memory limit is \(memoryLimit.map { "\($0) bytes" } ?? "the system's"))")
        }
        if traceback { return LuaError.fromHandler(text, kind: kind) }
        var error = LuaError(kind: kind, message: text)
        error.valueSerial = keepErrorValue(thread)
        return error
    }

    /// Keeps the error value on top of `thread`'s stack (a table, a number,
    /// a string: whatever `error()` was given), so that a host function
    /// that called back into Lua (`db.transaction`) re-raises the same
    /// value to its caller's `pcall` instead of a description of it.
    private func keepErrorValue(_ thread: OpaquePointer) -> Int {
        lua_pushvalue(thread, -1)
        lua_setfield(thread, opsh_registryindex(), Self.errorValueKey)
        errorValueSerial &+= 1
        return errorValueSerial
    }

    /// Pushes the kept error value of `error` on `thread`; false when it
    /// is no longer kept (a newer error replaced it).
    func pushErrorValue(of error: LuaError, on thread: OpaquePointer) -> Bool {
        guard let serial = error.valueSerial, serial == errorValueSerial else { return false }
        lua_getfield(thread, opsh_registryindex(), Self.errorValueKey)
        return true
    }

    private func interruptMessage(_ reason: LuaInterruptReason) -> String {
        switch reason {
        case .interrupted: return "interrupted"
        case .timeout: return "timed out"
        case .terminated: return "terminated"
        case .exit: return "os.exit(\(exitStatus))"
        }
    }

    private func incompleteMessage(_ code: String, chunkName: String) -> String {
        var code = code
        let status = code.withUTF8 { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                opsh_load(state, chars.baseAddress, chars.count, chunkName, "t")
            }
        }
        defer { opsh_pop(state, 1) }
        return status == LUA_OK ? "incomplete chunk" : (stack.string(at: -1) ?? "incomplete chunk")
    }

    // MARK: Interrupts and limits

    /// Stops the running chunk, from any thread: every Lua instruction
    /// raises until the outermost protected call has returned, so a
    /// script's own `pcall` cannot swallow it. Does nothing (and returns
    /// false) when no chunk runs.
    @discardableResult
    public func interrupt(_ reason: LuaInterruptReason) -> Bool {
        let isRunning = running.withLock { count in
            if count > 0 { opsh_interrupt(state, reason.rawValue) }
            return count > 0
        }
        guard isRunning else { return false }
        for handler in interruptHandlers.withLock({ $0 }) { handler(reason) }
        return true
    }

    /// Interrupts the running chunk, waiting up to `patience` seconds for
    /// one to start (a timer that fires just before a chunk runs would
    /// otherwise be lost). Blocks the calling thread; returns whether the
    /// interrupt landed.
    @discardableResult
    public func interruptWhenRunning(_ reason: LuaInterruptReason, patience: Double = 10) -> Bool {
        var waited = 0.0
        while !interrupt(reason) {
            guard waited < patience else { return false }
            usleep(5_000)
            waited += 0.005
        }
        return true
    }

    /// The status `os.exit` asked for (``LuaError/Kind/exit(_:)``).
    private var exitStatus: Int32 = 0

    /// `os.exit([status [, close]])` as `lua` takes it (true: 0, false: 1,
    /// an integer: itself), but without leaving the process from inside
    /// Lua: it stops the chunk the way an interrupt does (every instruction
    /// raises until the host's outermost protected call has returned, so a
    /// `pcall` cannot swallow it), and the host ends the run as a returning
    /// script ends it (commit or roll back by the mode's rule, the summary,
    /// the audit row) before it exits with the status. Safe in the sandbox.
    private func installExit() {
        lua_getglobal(state, "os")
        defer { opsh_pop(state, 1) }
        guard lua_type(state, -1) == LUA_TTABLE else { return }
        pushFunction("exit") { [unowned self] call in
            let status: Int32
            switch lua_type(call.state, 1) {
            case LUA_TNONE, LUA_TNIL: status = 0
            case LUA_TBOOLEAN: status = call.boolean(1) ? 0 : 1
            default:
                let value = try call.integer(1)
                guard let fitting = Int32(exactly: value) else {
                    throw call.argumentError(1, "an exit status from 0 to 255 expected, got \(value)")
                }
                status = fitting
            }
            exitStatus = status
            opsh_interrupt(state, LuaInterruptReason.exit.rawValue)
            throw LuaCallError.message("os.exit(\(status))")
        }
        stack.setField("exit", at: -2)
    }

    /// Whether an interrupt is pending: host functions that wait or loop
    /// check it and give up.
    /// Set by a host function that stops for an interrupt, to say what
    /// goes on without it; carried by the interrupt's ``LuaError/note``.
    public var interruptNote: String?

    public var interruptRequested: LuaInterruptReason? {
        LuaInterruptReason(rawValue: opsh_interrupt_reason(state))
    }

    /// The flag that stops statements (an `atomic_int`, not 0 from an
    /// interrupt until the interrupted chunk has ended, except while a
    /// script's `__close` handler the first interrupt lets run runs: its
    /// own SQL runs, as after lua.c's first Ctrl-C, until a second
    /// interrupt), for a check that must not miss one (SQLite's progress
    /// handler: `opsh_stop.h`). Valid while the runtime lives.
    public var interruptFlag: UnsafeRawPointer { opsh_interrupt_flag(state) }

    /// Runs `handler` on each interrupt (e.g. to interrupt SQLite).
    public func onInterrupt(_ handler: @escaping @Sendable (LuaInterruptReason) -> Void) {
        interruptHandlers.withLock { $0.append(handler) }
    }

    /// Runs `handler` on the Lua thread whenever the outermost chunk or
    /// call returns (e.g. to let go of a read snapshot while idle).
    public func onIdle(_ handler: @escaping () -> Void) {
        idleHandlers.append(handler)
    }

    /// Changes the memory limit (nil: none).
    public func setMemoryLimit(_ bytes: Int?) {
        opsh_set_memory_limit(state, bytes.map { max($0, 0) } ?? 0)
        memoryLimit = bytes
    }

    /// The limit in force, for the "not enough memory" message (a limit set
    /// here, as `opsh --memory-limit` does, was reported as "the system's").
    private lazy var memoryLimit: Int? = options.memoryLimit

    // MARK: References

    /// Frees registry slots of references Swift has let go of.
    func drainReleasedReferences() {
        for slot in references.drain() { opsh_unref(state, slot) }
    }
}

extension LuaRuntime: @unchecked Sendable {}

extension LuaRuntime {
    /// The linked Lua's release, "Lua 5.4.4" (`opsh --version`).
    public static let release = "Lua \(LUA_VERSION_MAJOR).\(LUA_VERSION_MINOR).\(LUA_VERSION_RELEASE)"
}
