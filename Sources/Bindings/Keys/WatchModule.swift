import CLuaShim
import Foundation
import Synchronization
import LuaRuntime
import Store

/// `watch(keyOrSql, fn, ...)` and `opsh.wait([seconds])`.
///
/// ```lua
/// local h = watch(key.build(id), function(build, old)
///   print(old.status, "->", build.status)
///   if build.status ~= "running" then h:cancel() end
/// end)
/// opsh.wait(600)        -- runs callbacks until no watch is left, or 600 s
/// local w = watch("SELECT count(*) AS n FROM builds WHERE status = ?", function(rows) print(rows[1].n) end, "running")
/// ```
///
/// A watch is fetched the way `query(key)` and `db.query(sql, …)` fetch,
/// on the Lua thread: a key that is one statement, and any SQL, run a
/// cached statement on the `db` module's machinery and build each row once,
/// straight into a Lua table (ARCHITECTURE.md, "One data path"). What runs
/// on another thread is only the signal: ``StorageClient/observeTables``
/// (in-process commits, and other processes' through `PRAGMA
/// data_version`) marks the watch changed and posts one event to the
/// session's queue; when the shell or `opsh.wait` delivers it, the value
/// is fetched again from a fresh snapshot and the callback runs only when
/// it differs from the last one it saw (ARCHITECTURE.md, decision 2). A
/// burst of commits between two deliveries costs one fetch. A watch lives
/// until `:cancel()` or the end of the session, whether or not Lua keeps
/// its handle (`watch(k, fn)` typed at the prompt keeps working);
/// `opsh.watches()` lists the live ones.
final class WatchModule {
    static let typeName = "opsh.watch"

    unowned let session: any WatchHost
    /// The `opsh.wait` call delivering events now: callbacks run on its
    /// Lua thread (a coroutine's, maybe) rather than the main one.
    private var deliveringCall: LuaCall?
    /// `start(state, description, fetch, ...)`: fills a watch's state,
    /// `{ description, fetch = a function calling fetch(...), last = its
    /// first value }`; `deliver(state, fn)`: fetches again and calls
    /// `fn(new, old)` when the value changed as data. Compiled at the first
    /// `watch` (``helpers()``): a script without one does not pay for it
    /// (ARCHITECTURE.md, "Start-up").
    private var made: (start: LuaReference, deliver: LuaReference)?
    /// The functions a watch fetches with, as `db` and `query` were
    /// installed (a script that replaces the globals does not change them).
    private let sqlQuery: LuaReference
    private let keyQuery: LuaReference
    /// Live watches by subscription id.
    fileprivate(set) var live: [Int: Watch] = [:]

    private init(session: any WatchHost) throws {
        self.session = session
        let runtime = session.runtime
        let state = runtime.state
        let base = lua_gettop(state)
        defer { lua_settop(state, base) }
        guard lua_getglobal(state, "db") == LUA_TTABLE, lua_getfield(state, -1, "query") == LUA_TFUNCTION,
              lua_getglobal(state, "query") == LUA_TFUNCTION else {
            throw LuaError(kind: .runtime, message: "cannot create the watch functions (db and query are installed first)")
        }
        sqlQuery = runtime.stack.reference(at: -2)
        keyQuery = runtime.stack.reference(at: -1)
        // The library functions the helpers call, as they are now: a
        // script that replaces `pcall` before its first watch does not
        // change them.
        lua_settop(state, base)
        var library: [LuaReference] = []
        for (table, name) in [("table", "pack"), ("table", "unpack"), (nil, "pcall"), (nil, "error"), (nil, "tostring")] {
            if let table {
                lua_getglobal(state, table)
                lua_getfield(state, -1, name)
            } else {
                lua_getglobal(state, name)
            }
            library.append(runtime.stack.reference(at: -1))
            lua_settop(state, base)
        }
        helperLibrary = library
    }

    /// `table.pack`, `table.unpack`, `pcall`, `error` and `tostring` as
    /// they were when the module was installed.
    private let helperLibrary: [LuaReference]

    /// `start` and `deliver`, compiled the first time a watch is made.
    private func helpers() throws -> (start: LuaReference, deliver: LuaReference) {
        if let made { return made }
        let runtime = session.runtime
        lua_pushcclosure(runtime.state, opsh_lua_data_equal, 0)
        let equal = runtime.stack.reference(at: -1)
        runtime.stack.pop()
        let functions = try runtime.execute("""
            local pack, unpack, pcall, error, tostring, equal = ...
            local function start(watch, description, fetch, ...)
              local args = pack(...)
              watch.description = description
              watch.fetch = function() return fetch(unpack(args, 1, args.n)) end
              watch.last = watch.fetch()
            end
            local function deliver(watch, fn)
              local ok, value = pcall(watch.fetch)
              if not ok then error("watch(" .. watch.description .. "): " .. tostring(value), 0) end
              local old = watch.last
              if equal(value, old) then return end
              watch.last = value
              fn(value, old)
            end
            return start, deliver
            """, chunkName: "=(watch)", arguments: helperLibrary.map { .reference($0) } + [.reference(equal)])
        guard functions.count == 2, case let .reference(start) = functions[0],
              case let .reference(deliver) = functions[1] else {
            throw LuaError(kind: .runtime, message: "cannot create the watch functions")
        }
        made = (start, deliver)
        return (start, deliver)
    }

    static func install(in session: any WatchHost) throws {
        let module = try WatchModule(session: session)
        let runtime = session.runtime
        runtime.register("watch") { call in try module.watch(call) }
        runtime.register(module: "opsh", [
            "wait": { call in try module.wait(call) },
            "watches": { call in
                lua_createtable(call.state, Int32(module.live.count), 0)
                for (index, id) in module.live.keys.sorted().enumerated() {
                    call.host.pushObject(module.live[id]!, type: typeName, methods: [:], on: call.state)
                    lua_rawseti(call.state, -2, lua_Integer(index + 1))
                }
                return 1
            },
        ])
        // The handle's metatable, created once per state.
        let probe = Watch(module: module, description: "", state: nil)
        runtime.pushObject(probe, type: typeName, methods: [
            "cancel": { call in
                try call.object(1, as: Watch.self, typeName: typeName).cancel()
                return 0
            },
            "value": { call in
                let watch = try call.object(1, as: Watch.self, typeName: typeName)
                guard let state = watch.state else { return 0 }
                call.stack.push(.reference(state))
                lua_getfield(call.state, -1, "last")
                return 1
            },
            "active": { call in
                call.results(.boolean(try call.object(1, as: Watch.self, typeName: typeName).isActive))
            },
        ], metamethods: [
            "__tostring": { call in
                let watch = try call.object(1, as: Watch.self, typeName: typeName)
                return call.results(.string("watch(\(watch.description))\(watch.isActive ? "" : " cancelled")"))
            },
        ])
        runtime.stack.pop()
    }

    // MARK: watch

    private func watch(_ call: LuaCall) throws -> Int32 {
        let callback = try call.function(2)
        let source = try WatchSource(call: call, host: session)
        // The state's fetch calls `query(key)` or `db.query(sql, …)` with
        // the call's own values (a key object, a db.blob stay what they are).
        lua_createtable(call.state, 0, 3)
        let state = call.stack.reference(at: -1)
        call.stack.pop()
        var arguments: [LuaValue] = [.reference(state), .string(source.description)]
        switch source.kind {
        case .key:
            arguments += [.reference(keyQuery), .reference(call.stack.reference(at: 1))]
        case .sql:
            arguments += [.reference(sqlQuery), .reference(call.stack.reference(at: 1))]
            if call.argumentCount >= 3 {
                for index in 3...call.argumentCount { arguments.append(.reference(call.stack.reference(at: index))) }
            }
        }
        _ = try call.call(try helpers().start, arguments)
        let watch = Watch(module: self, description: source.description, state: state)
        // The subscription owns the watch until cancel() removes it.
        let id = session.subscriptions.subscribe { event in
            guard event is WatchEvent else { return }
            try watch.deliverChange()
        }
        live[id] = watch
        watch.subscription = id
        watch.callback = callback
        let events = session.subscriptions.events
        let signal = watch.signal
        do {
            watch.observation = try session.observe(source.tables) {
                // One event until it is delivered, however many commits.
                if signal.raise() { events.post(id, WatchEvent.changed) }
            }
        } catch {
            watch.cancel()
            throw error
        }
        call.host.pushObject(watch, type: Self.typeName, methods: [:], on: call.state)
        return 1
    }

    /// Fetches `watch` again and calls its callback with `(new, old)` when
    /// the value changed, on the delivering Lua thread.
    fileprivate func deliverChange(of watch: Watch, callback: LuaReference, state: LuaReference) throws {
        // The commit that raised the signal may be newer than the read
        // connection's shared snapshot: read from a fresh one.
        session.releaseReadSnapshot()
        let deliver = try helpers().deliver
        if let call = deliveringCall {
            _ = try call.call(deliver, [.reference(state), .reference(callback)])
        } else {
            try session.runtime.call(deliver, [.reference(state), .reference(callback)])
        }
    }

    // MARK: opsh.wait

    /// Delivers events for up to `seconds` (nil: until no watch is left).
    /// Returns true when no watch is left, false at the timeout, and the
    /// messages of callbacks that failed (also written to stderr).
    private func wait(_ call: LuaCall) throws -> Int32 {
        let timeout = try call.optionalNumber(1)
        if let timeout, !(timeout >= 0) {
            throw call.argumentError(1, "a number of seconds >= 0 expected")
        }
        if let transaction = session.openTransactionForWait {
            throw LuaCallError.message("opsh.wait cannot wait inside \(transaction): the database would stay locked for every other writer")
        }
        let runtime = session.runtime
        let previous = deliveringCall
        deliveringCall = call
        defer { deliveringCall = previous }
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        var failures: [LuaValue] = []
        while true {
            if let reason = runtime.interruptRequested {
                throw LuaCallError.message(reason == .timeout ? "timed out" : "interrupted")
            }
            for error in try session.subscriptions.deliver() {
                failures.append(.string(error.message))
                FileHandle.standardError.write(Data("opsh: watch callback failed: \(error.message)\n".utf8))
            }
            if session.subscriptions.isEmpty { return call.results(true, .array(failures)) }
            let remaining = deadline.map { $0.timeIntervalSinceNow }
            if let remaining, remaining <= 0 { return call.results(false, .array(failures)) }
            session.releaseReadSnapshot()
            _ = session.subscriptions.events.wait(timeout: remaining, shouldStop: { runtime.interruptRequested != nil })
        }
    }
}

/// What a watch's observation posts: its tables changed.
enum WatchEvent: Sendable {
    case changed
}

/// Set by the observation's thread when the watched tables change,
/// cleared by the Lua thread before it fetches again: at most one event
/// waits per watch.
final class WatchSignal: Sendable {
    private let pending = Mutex(false)

    /// Marks the watch changed; true when no event was waiting yet.
    func raise() -> Bool {
        pending.withLock { pending in
            defer { pending = true }
            return !pending
        }
    }

    func clear() { pending.withLock { $0 = false } }
}

/// One watch: the handle Lua holds (`opsh.watch`).
final class Watch {
    weak var module: WatchModule?
    /// Weak: the watches still in the Lua state are collected when the
    /// session closes it, after the session is gone.
    weak var session: (any WatchHost)?
    let description: String
    /// `{ description, fetch, last }` in Lua: the last value the callback
    /// saw (the value at `watch` time first). Nil for the metatable's probe.
    let state: LuaReference?
    let signal = WatchSignal()
    var subscription: Int?
    var callback: LuaReference?
    var observation: StorageCancellable?

    init(module: WatchModule, description: String, state: LuaReference?) {
        self.module = module
        self.session = module.session
        self.description = description
        self.state = state
    }

    var isActive: Bool { observation != nil }

    /// Stops the observation and forgets the callback. Safe from a
    /// garbage-collector finalizer: nothing here runs Lua.
    func cancel() {
        observation?.cancel()
        observation = nil
        callback = nil
        if let subscription {
            session?.subscriptions.unsubscribe(subscription)
            module?.live[subscription] = nil
        }
        subscription = nil
    }

    deinit { cancel() }

    func deliverChange() throws {
        signal.clear()
        guard let callback, let state, let module else { return }
        try module.deliverChange(of: self, callback: callback, state: state)
    }
}

/// What a watch observes: a query key, or a SELECT and its parameters.
struct WatchSource {
    enum Kind { case key, sql }
    let kind: Kind
    let description: String
    let tables: Set<String>
}

extension WatchSource {
    init(call: LuaCall, host: any WatchHost) throws {
        if call.type(1) == .string, let text = call.stack.string(at: 1), Self.isSQL(text) {
            let sql = try SQLTextReader.sql(call, 1)
            let arguments = try Self.arguments(call, from: 3)
            self.init(kind: .sql, description: sql, tables: try host.tablesRead(by: sql, arguments: arguments))
            return
        }
        let key = try KeyModule.queryKey(call, 1)
        if call.argumentCount > 2 {
            throw call.argumentError(3, "parameters go with an SQL query, not with a query key")
        }
        self.init(kind: .key, description: key.description, tables: key.observedTables)
    }

    /// A string is SQL when its first word starts an SQL statement (no
    /// key starts so); statements that write are refused later.
    static func isSQL(_ text: String) -> Bool {
        let word = text.drop(while: { $0.isWhitespace || $0 == "(" }).prefix(while: { $0.isLetter }).uppercased()
        return ["SELECT", "WITH", "VALUES", "INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER",
                "PRAGMA", "EXPLAIN"].contains(word)
    }

    /// Positional parameters from argument `first` on, or one table of
    /// named ones.
    static func arguments(_ call: LuaCall, from first: Int32) throws -> QueryArguments {
        guard call.argumentCount >= first else { return .positional([]) }
        if call.argumentCount == first, call.type(first) == .table {
            var named: [String: StoreValue] = [:]
            for (name, value) in try call.table(first) {
                named[name] = try parameter(value, call: call, index: first, label: ":" + name)
            }
            return .named(named)
        }
        var values: [StoreValue] = []
        for index in first...call.argumentCount {
            values.append(try parameter(try call.value(index), call: call, index: index, label: "?\(index - first + 1)"))
        }
        return .positional(values)
    }

    private static func parameter(_ value: LuaValue, call: LuaCall, index: Int32, label: String) throws -> StoreValue {
        switch value {
        case .nil: return .null
        case let .boolean(flag): return .integer(flag ? 1 : 0)
        case let .integer(number): return .integer(number)
        case let .number(number):
            if number.isNaN { throw call.argumentError(index, SQLValueReader.nanRefusal(label)) }
            return .real(number)
        case let .string(text): return .text(text)
        case let .bytes(bytes): return .blob(bytes)
        default:
            throw call.argumentError(index, "SQL parameter expected (nil, boolean, number or string), got \(value.typeName)")
        }
    }
}
