import Foundation
import LuaRuntime
import Store

/// One Lua state wired to one database: what the shell and the batch modes
/// run code in.
///
/// It creates the Lua runtime, installs every module (`db`, the
/// repositories, `query`/`key`, `watch`, `migrate`, maintenance, `jobs`,
/// `git`) and owns the queue through which other threads hand events to
/// the Lua thread.
public final class OpshSession {
    public struct Options: Sendable {
        /// Lua without the system (see ``LuaRuntime/Options/sandbox``).
        public var sandbox = false
        /// Bytes the Lua state may hold.
        public var memoryLimit: Int?
        /// Install the costlier modules (the repositories, `jobs`) on their
        /// first use instead of at start: for the batch modes, where start-up
        /// time counts. The shell installs everything, so that completion
        /// sees every function.
        public var lazyModules = false

        public init(sandbox: Bool = false, memoryLimit: Int? = nil, lazyModules: Bool = false) {
            self.sandbox = sandbox
            self.memoryLimit = memoryLimit
            self.lazyModules = lazyModules
        }
    }

    public let runtime: LuaRuntime

    deinit {
        // The flag lives in the Lua state, which goes with this session.
        database.stopStatements(whenSet: nil)
    }
    /// The session's database, whatever its engine: every module runs on it.
    public let database: any DatabaseSession
    let subscriptions = Subscriptions()
    public var events: EventQueue { subscriptions.events }
    public let options: Options
    let markers: SQLMarkers
    let rowShapes: RowShapes
    /// How rows reach Lua: the engine's one row path.
    let rows: any RowRunner

    /// A session over an SQLite store (tests; the modes open theirs with
    /// ``LuaSessions``).
    public convenience init(store: Store, options: Options = Options()) throws {
        try self.init(database: SessionDatabase(store: store), options: options)
    }

    public init(database: any DatabaseSession, options: Options = Options()) throws {
        self.options = options
        self.database = database
        runtime = try LuaRuntime(options: .init(sandbox: options.sandbox))
        runtime.register(module: "db", [:])
        runtime.stack.pushGlobal("db")
        markers = SQLMarkers.install(in: runtime.state)
        runtime.stack.pop()
        rowShapes = RowShapes(runtime: runtime)
        switch database.rowPath {
        case let .sqlite(sqlite):
            sqlite.protectsBuildCommands = options.sandbox
            rows = try SQLiteRows(database: sqlite, runtime: runtime, markers: markers, rowShapes: rowShapes)
        case let .wire(statements):
            rows = WireRows(statements: statements, markers: markers, rowShapes: rowShapes)
        }
        // Ctrl-C, a timeout or SIGTERM also stop the statement a binding is
        // waiting on (SQLite: sqlite3_interrupt; PostgreSQL: a cancel on the
        // server).
        let interrupt = database.interruptRunning
        runtime.onInterrupt { _ in interrupt() }
        database.stopStatements(whenSet: runtime.interruptFlag)
        try installModules()
        if options.sandbox { try confine() }
        if let limit = options.memoryLimit {
            runtime.setMemoryLimit(limit)
            rows.limitValueLength(to: limit)
        }
    }

    /// Every module of the Lua API, each in its own file.
    private func installModules() throws {
        DatabaseModule.install(in: self)
        OpshModule.install(in: self)
        KeyModule.install(in: self)
        try install(modules: ["key"]) { KeyModule.installBuilder(runtime: $0.runtime) }
        try WatchModule.install(in: self)
        MigrationModule.install(in: self)
        GitModule.install(in: self)
        TelemetryCleanupModule.install(in: self)
        AnalyticsModule.install(in: self)
        JSONModule.install(in: self)
        try install(modules: ["config"]) { ConfigModule.install(in: $0) }
        MaintenanceModule.install(in: self)
        TransferModule.install(in: self)
        HelpModule.install(in: self)
        AuditModule.install(in: self)
        // The costliest to install (generic record types, the job manager's
        // settings), and the ones a short script least often needs.
        try install(modules: ["jobs"]) { try JobsModule.install(in: $0) }
        try install(modules: ["projects", "schemes", "builds", "logs", "crashes"]) { BuildServerModules.install(in: $0) }
        try install(modules: ["models", "sessions", "telemetry"]) { SDKRepositoryModules.install(in: $0) }
    }

    /// Installs the modules `names` now, or on first use with
    /// ``Options/lazyModules``.
    private func install(modules names: [String], _ body: @escaping (OpshSession) throws -> Void) throws {
        guard options.lazyModules else { return try body(self) }
        runtime.registerLazily(modules: names) { [unowned self] in try body(self) }
    }

    /// `--sandbox`: the modules that reach files or processes (`git`,
    /// `jobs`, `backup`) raise an error, and SQL cannot ATTACH another file
    /// (nor `VACUUM INTO` one, which attaches).
    private func confine() throws {
        rows.confine()
        try runtime.execute("""
            local function refused(name)
              return function() error(name .. " is not available in --sandbox (no files or processes)", 2) end
            end
            local function module(name)
              return setmetatable({}, { __index = function(_, field) return refused(name .. "." .. field) end })
            end
            git, jobs, backup = module("git"), module("jobs"), refused("backup")
            """, chunkName: "=(sandbox)")
    }

    /// Lets go of the read snapshot shared by a burst of reads: call it
    /// before blocking (waiting for events), so a waiting script neither
    /// reads old data afterwards nor holds the WAL back.
    public func releaseReadSnapshot() {
        database.releaseReadSnapshot()
    }

    // MARK: Events

    /// Registers what to do with the events posted for a new subscription
    /// id; returns the id.
    func subscribe(_ handler: @escaping (Any & Sendable) throws -> Void) -> Int {
        subscriptions.subscribe(handler)
    }

    func unsubscribe(_ id: Int) {
        subscriptions.unsubscribe(id)
    }

    /// Whether anything (a watch, a followed job) may still post events.
    public var hasSubscriptions: Bool { !subscriptions.isEmpty }

    /// Runs the handlers of queued events on this (the Lua) thread.
    /// Errors raised by callbacks are returned, not thrown, so one bad
    /// callback does not stop the others; an interrupt is thrown.
    @discardableResult
    public func deliverEvents() throws -> [LuaError] {
        try subscriptions.deliver()
    }
}

/// A reference that does not keep its object alive (a closure the store
/// keeps must not keep the session's runtime alive). Loading a weak
/// reference is safe from any thread.
final class WeakReference<T: AnyObject>: @unchecked Sendable {
    weak var object: T?
    init(_ object: T) { self.object = object }
}

struct UncheckedSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
