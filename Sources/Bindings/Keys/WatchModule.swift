import CLuaShim
import Foundation
import GRDB
import GRDBSQLite
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
/// An observation (``QueryObservation``: in-process commits, and other
/// processes' through `PRAGMA data_version`) re-fetches on another thread
/// and posts the value to the session's event queue; the callback runs on
/// the Lua thread only (ARCHITECTURE.md, decision 2), when the shell or
/// `opsh.wait` delivers events, and only when the value differs from the
/// last one it saw. A watch lives until `:cancel()` or the end of the
/// session, whether or not Lua keeps its handle (`watch(k, fn)` typed at
/// the prompt keeps working); `opsh.watches()` lists the live ones.
final class WatchModule {
    static let typeName = "opsh.watch"

    unowned let session: OpshSession
    /// The `opsh.wait` call delivering events now: callbacks run on its
    /// Lua thread (a coroutine's, maybe) rather than the main one.
    private var deliveringCall: LuaCall?
    /// `function(slots, fn)`: calls `fn(slots[1], slots[2])` after
    /// clearing the slots. Values reach callbacks through it, so that no
    /// registry reference is taken per event.
    private let trampoline: LuaReference
    private let slots: LuaReference
    /// Live watches by subscription id.
    fileprivate(set) var live: [Int: Watch] = [:]

    private init(session: OpshSession) throws {
        self.session = session
        let made = try session.runtime.execute("""
            return function(slots, fn)
              local new, old = slots[1], slots[2]
              slots[1], slots[2] = nil, nil
              fn(new, old)
            end, {}
            """, chunkName: "=(watch)")
        guard made.count == 2, case let .reference(trampoline) = made[0] else {
            throw LuaError(kind: .runtime, message: "cannot create the watch trampoline")
        }
        self.trampoline = trampoline
        session.runtime.stack.push(.table([:]))
        slots = session.runtime.stack.reference(at: -1)
        session.runtime.stack.pop()
    }

    static func install(in session: OpshSession) throws {
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
        let probe = Watch(module: module, description: "", asRows: false, columns: nil, last: .null)
        runtime.pushObject(probe, type: typeName, methods: [
            "cancel": { call in
                try call.object(1, as: Watch.self, typeName: typeName).cancel()
                return 0
            },
            "value": { call in
                let watch = try call.object(1, as: Watch.self, typeName: typeName)
                watch.module?.pusher(call.state).push(watch.last, asRows: watch.asRows, columns: watch.columns)
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

    func pusher(_ state: OpaquePointer) -> StoreValuePusher {
        StoreValuePusher(rowShapes: session.sql.rowShapes, state: state)
    }

    // MARK: watch

    private func watch(_ call: LuaCall) throws -> Int32 {
        let callback = try call.function(2)
        let source = try WatchSource(call: call, database: session.database)
        let initial = try session.database.read { db in try source.fetch(db) }
        let watch = Watch(module: self, description: source.description, asRows: source.asRows,
                          columns: source.columns, last: initial)
        // The subscription owns the watch until cancel() removes it.
        let id = session.subscribe { event in
            try watch.deliver(event as? WatchEvent)
        }
        live[id] = watch
        watch.subscription = id
        watch.callback = callback
        let events = session.events
        let fetch = source.fetch
        do {
            watch.observation = try QueryObservation(
                client: session.store.client, tables: source.tables, fetch: fetch,
                onChange: { result in
                    switch result {
                    case let .success(value): events.post(id, WatchEvent.value(value))
                    case let .failure(error): events.post(id, WatchEvent.failure(String(describing: error)))
                    }
                })
        } catch {
            watch.cancel()
            throw error
        }
        call.host.pushObject(watch, type: Self.typeName, methods: [:], on: call.state)
        return 1
    }

    /// Calls `callback(new, old)` on the delivering Lua thread.
    fileprivate func invoke(_ callback: LuaReference, _ new: StoreValue, _ old: StoreValue, of watch: Watch) throws {
        let call = deliveringCall
        let stack = call?.stack ?? session.runtime.stack
        stack.push(.reference(slots))
        let push = pusher(stack.state)
        push.push(new, asRows: watch.asRows, columns: watch.columns)
        lua_rawseti(stack.state, -2, 1)
        push.push(old, asRows: watch.asRows, columns: watch.columns)
        lua_rawseti(stack.state, -2, 2)
        stack.pop()
        if let call {
            _ = try call.call(trampoline, [.reference(slots), .reference(callback)])
        } else {
            try session.runtime.call(trampoline, [.reference(slots), .reference(callback)])
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
        if session.database.isInTransaction {
            throw LuaCallError.message("opsh.wait cannot wait inside \(session.database.openTransactionName): the database would stay locked for every other writer")
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
            for error in try session.deliverEvents() {
                failures.append(.string(error.message))
                FileHandle.standardError.write(Data("opsh: watch callback failed: \(error.message)\n".utf8))
            }
            if !session.hasSubscriptions { return call.results(true, .array(failures)) }
            let remaining = deadline.map { $0.timeIntervalSinceNow }
            if let remaining, remaining <= 0 { return call.results(false, .array(failures)) }
            session.releaseReadSnapshot()
            _ = session.events.wait(timeout: remaining, shouldStop: { runtime.interruptRequested != nil })
        }
    }
}

/// What a watch posts from the observation's thread.
enum WatchEvent: Sendable {
    case value(StoreValue)
    case failure(String)
}

/// One watch: the handle Lua holds (`opsh.watch`).
final class Watch {
    weak var module: WatchModule?
    /// Weak: the watches still in the Lua state are collected when the
    /// session closes it, after the session is gone.
    weak var session: OpshSession?
    let description: String
    let asRows: Bool
    let columns: [String]?
    /// The last value the callback saw (the value at `watch` time first).
    var last: StoreValue
    var subscription: Int?
    var callback: LuaReference?
    var observation: QueryObservation?

    init(module: WatchModule, description: String, asRows: Bool, columns: [String]?, last: StoreValue) {
        self.module = module
        self.session = module.session
        self.description = description
        self.asRows = asRows
        self.columns = columns
        self.last = last
    }

    var isActive: Bool { observation != nil }

    /// Stops the observation and forgets the callback. Safe from a
    /// garbage-collector finalizer: nothing here runs Lua.
    func cancel() {
        observation?.cancel()
        observation = nil
        callback = nil
        if let subscription {
            session?.unsubscribe(subscription)
            module?.live[subscription] = nil
        }
        subscription = nil
    }

    deinit { cancel() }

    func deliver(_ event: WatchEvent?) throws {
        guard let event, let callback, let module else { return }
        switch event {
        case let .value(value):
            guard value != last else { return }
            let old = last
            last = value
            try module.invoke(callback, value, old, of: self)
        case let .failure(message):
            throw LuaCallError.message("watch(\(description)): \(message)")
        }
    }
}

/// What a watch observes: a query key, or a SELECT and its parameters.
struct WatchSource {
    let description: String
    let tables: Set<String>
    let asRows: Bool
    let columns: [String]?
    let fetch: @Sendable (Database) throws -> StoreValue
}

extension WatchSource {
    init(call: LuaCall, database: SessionDatabase) throws {
        if call.type(1) == .string, let sql = call.stack.string(at: 1), Self.isSQL(sql) {
            let arguments = try Self.arguments(call, from: 3)
            let found = try Self.inspect(sql: sql, arguments: arguments, database: database)
            self.init(description: sql, tables: found.tables, asRows: true, columns: found.columns, fetch: { db in
                .array(try Row.fetchAll(db, sql: sql, arguments: arguments).map(StoreValue.init))
            })
            return
        }
        let key = try KeyModule.queryKey(call, 1)
        if call.argumentCount > 2 {
            throw call.argumentError(3, "parameters go with an SQL query, not with a query key")
        }
        self.init(description: key.description, tables: key.observedTables, asRows: key.valueIsRows,
                  columns: nil, fetch: { db in try key.fetch(db) })
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
    static func arguments(_ call: LuaCall, from first: Int32) throws -> StatementArguments {
        guard call.argumentCount >= first else { return StatementArguments() }
        if call.argumentCount == first, call.type(first) == .table {
            var named: [String: (any DatabaseValueConvertible)?] = [:]
            for (name, value) in try call.table(first) {
                named[name] = try databaseValue(value, call: call, index: first)
            }
            return StatementArguments(named)
        }
        var values: [(any DatabaseValueConvertible)?] = []
        for index in first...call.argumentCount {
            values.append(try databaseValue(try call.value(index), call: call, index: index))
        }
        return StatementArguments(values)
    }

    private static func databaseValue(_ value: LuaValue, call: LuaCall, index: Int32) throws -> DatabaseValue {
        switch value {
        case .nil: return .null
        case let .boolean(flag): return flag.databaseValue
        case let .integer(number): return number.databaseValue
        case let .number(number): return number.databaseValue
        case let .string(text): return text.databaseValue
        case let .bytes(bytes): return Data(bytes).databaseValue
        default:
            throw call.argumentError(index, "SQL parameter expected (nil, boolean, number or string), got \(value.typeName)")
        }
    }

    /// Prepares `sql` to check it and learn its columns and the tables it
    /// reads (through SQLite's authorizer, as GRDB's region).
    static func inspect(sql: String, arguments: StatementArguments, database: SessionDatabase) throws
        -> (columns: [String], tables: Set<String>)
    {
        do {
            return try database.unsafeRead { db in
                let statement = try db.makeStatement(sql: sql)
                try TransactionGuard.check(statement.sqliteStatement, on: db.sqliteConnection!)
                guard statement.isReadonly, sqlite3_stmt_isexplain(statement.sqliteStatement) == 0 else {
                    throw LuaCallError.message("watch observes queries only (SELECT …): \(sql)")
                }
                try statement.validateArguments(arguments)
                let region = statement.databaseRegion
                var tables: Set<String> = []
                if !region.isFullDatabase {
                    for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
                    where region.isModified(byEventsOfKind: .insert(tableName: table)) {
                        tables.insert(table)
                    }
                }
                return (statement.columnNames, tables)
            }
        } catch let error as DatabaseError {
            throw LuaCallError.message("\(error.message ?? "\(error.resultCode)") in watch(\(sql))")
        }
    }
}
