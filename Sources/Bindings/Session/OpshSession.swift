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
    public let store: Store
    public let database: SessionDatabase
    let subscriptions = Subscriptions()
    public var events: EventQueue { subscriptions.events }
    public let options: Options
    let sql: SQLExecutor
    /// The repositories' statements on the `db` module's machinery.
    lazy var repositoryStatements = RepositoryStatements(executor: sql)
    private let readConnection: ReadConnection?
    /// Subscriptions (watches, followed jobs): what to do with their
    /// events on the Lua thread.

    public convenience init(store: Store, options: Options = Options()) throws {
        try self.init(database: SessionDatabase(store: store), options: options)
    }

    public init(database: SessionDatabase, options: Options = Options()) throws {
        let store = database.store
        self.store = store
        self.options = options
        runtime = try LuaRuntime(options: .init(sandbox: options.sandbox))
        self.database = database
        database.protectsBuildCommands = options.sandbox
        let readConnection = try store.path.map {
            try ReadConnection(path: store.readingName ?? $0, lockWait: store.lockWait, beforeFirstUse: { try store.connect() })
        }
        runtime.register(module: "db", [:])
        runtime.stack.pushGlobal("db")
        let markers = SQLMarkers.install(in: runtime.state)
        runtime.stack.pop()
        sql = SQLExecutor(session: database, readConnection: readConnection, markers: markers,
                          rowShapes: RowShapes(runtime: runtime))

        // Ctrl-C, a timeout or SIGTERM also stop the SQL statement a
        // binding is waiting on.
        let interruptTargets = UncheckedSendable((store, readConnection))
        let interruptedDatabase = UncheckedSendable(database)
        runtime.onInterrupt { _ in
            interruptTargets.value.0.interrupt()
            interruptTargets.value.1?.interrupt()
            interruptedDatabase.value.interrupt()
        }
        // sqlite3_interrupt does not reach a statement waiting for another
        // process's lock: that wait gives up while the chunk is interrupted.
        let interruptedRuntime = WeakReference(runtime)
        store.lockWait.abandon(when: { interruptedRuntime.object?.interruptRequested != nil })

        runtime.onIdle { [weak readConnection] in readConnection?.endSnapshot() }
        self.readConnection = readConnection
        try installModules()
        if options.sandbox { try confine() }
        if let limit = options.memoryLimit {
            runtime.setMemoryLimit(limit)
            limitValueLength(to: limit)
        }
    }

    /// Under a memory limit, SQLite itself refuses to make a string or BLOB
    /// longer than the limit ("string or blob too big"): a
    /// `randomblob(100000000)` never costs 100 MB before Lua could refuse it.
    private func limitValueLength(to limit: Int) {
        database.limitEveryConnection(.valueLength(max(limit, 1024)), readConnection: readConnection)
    }

    /// Every module of the Lua API, each in its own file.
    private func installModules() throws {
        DatabaseModule.install(in: self)
        OpshModule.install(in: self)
        KeyModule.install(in: self)
        try WatchModule.install(in: self)
        MigrationModule.install(in: self)
        GitModule.install(in: self)
        TelemetryCleanupModule.install(in: self)
        AnalyticsModule.install(in: self)
        JSONModule.install(in: self)
        ConfigModule.install(in: self)
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
        database.limitEveryConnection(.attachedDatabases(0), readConnection: readConnection)
        readConnection.map(database.confine)
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
        readConnection?.endSnapshot()
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
