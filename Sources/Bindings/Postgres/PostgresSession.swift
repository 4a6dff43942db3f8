import CLuaShim
import Foundation
import LuaRuntime
import Store

/// One Lua state wired to a PostgreSQL database (`--db postgresql://…`):
/// what the shell, `opsh run` and `opsh -e` run a script in there.
///
/// These modules run on PostgreSQL with the same API as on SQLite: `db`
/// (``PostgresDatabaseModule``), the repositories
/// (``PostgresRepositoryModules``), `key`, `query` and `watch`, `backup`,
/// `check`, `stats`, `vacuum`, `checkpoint` and `telemetry.cleanup`
/// (``PostgresMaintenanceModule``), `audit`, `migrate`, `export` and
/// `import`, `analytics`, `jobs`, `git`, `json` and `help`. Any in
/// ``missingModules`` or ``missingFunctions`` raises an error saying it is
/// not on PostgreSQL yet, rather than running on another database; `undo`
/// (SQLite's changesets) raises one saying why it is not, and what to use.
public final class PostgresSession {
    public let runtime: LuaRuntime
    public let database: PostgresDatabase
    let markers: SQLMarkers
    let rowShapes: RowShapes
    let subscriptions = Subscriptions()
    /// Where watch callbacks wait for the Lua thread (the shell polls it).
    public var events: EventQueue { subscriptions.events }
    /// `--sandbox`: no files, no processes.
    public let sandbox: Bool
    /// Hears commits for `watch`: started by the first watch.
    private lazy var listener = PostgresChangeListener(url: database.url)

    /// The modules a PostgreSQL session does not have yet.
    public static let missingModules: [String] = []
    public static let missingFunctions: [String] = []

    /// Why `undo()` is SQLite's only, and what to do instead.
    public static let undoRefusal = "undo() is not available on PostgreSQL: it takes a chunk back by applying the inverse of the changeset SQLite's session extension recorded for it, and PostgreSQL keeps no changeset of a transaction; to try a change before keeping it, start the shell with --dry-run (the whole session is rolled back when it ends) or run the change inside db.transaction and raise an error to roll it back (a chunk that fails keeps nothing)"

    public init(database: PostgresDatabase, sandbox: Bool = false, memoryLimit: Int? = nil) throws {
        self.database = database
        self.sandbox = sandbox
        runtime = try LuaRuntime(options: .init(sandbox: sandbox))
        runtime.register(module: "db", [:])
        runtime.stack.pushGlobal("db")
        markers = SQLMarkers.install(in: runtime.state)
        runtime.stack.pop()
        rowShapes = RowShapes(runtime: runtime)
        // Ctrl-C, a timeout or SIGTERM cancel the statement on the server.
        let cancel = database.cancelRunning
        runtime.onInterrupt { _ in cancel() }
        PostgresDatabaseModule.install(in: self)
        JSONModule.install(runtime: runtime, markers: markers)
        HelpModule.install(runtime: runtime)
        KeyModule.installBuilder(runtime: runtime)
        installQuery()
        try WatchModule.install(in: self)
        PostgresRepositoryModules.install(in: self)
        PostgresMaintenanceModule.install(in: self)
        AnalyticsModule.install(runtime: runtime, rowShapes: rowShapes) { [database] body in try body(database) }
        MigrationModule.install(in: self)
        TransferModule.install(in: self)
        AuditModule.install(engine: PostgresRepositoryEngine(session: self), runtime: runtime)
        try PostgresJobsEngine.install(in: self)
        // Scripts say "would delete" under `opsh run --dry-run`, as on SQLite.
        runtime.register(module: "opsh", [
            "dryRun": { [database] call in call.results(.boolean(database.isDryRun)) },
        ])
        try refuseMissingModules()
        if let memoryLimit { runtime.setMemoryLimit(memoryLimit) }
    }

    /// `query(key)`: the key's statements on the server, assembled as on SQLite.
    private func installQuery() {
        let database = database
        let rowShapes = rowShapes
        runtime.register("query") { call in
            let key = try KeyModule.queryKey(call, 1)
            let value = try key.fetch(database)
            StoreValuePusher(rowShapes: rowShapes, state: call.state).push(value, asRows: key.valueIsRows)
            return 1
        }
    }

    private func refuseMissingModules() throws {
        let modules = Self.missingModules.map { "\"\($0)\"" }.joined(separator: ", ")
        let functions = Self.missingFunctions.map { "\"\($0)\"" }.joined(separator: ", ")
        try runtime.execute("""
            local function missing(name)
              error(name .. " is not available on PostgreSQL yet: use db.query, db.exec and db.transaction", 3)
            end
            for _, name in ipairs({ \(modules) }) do
              _G[name] = setmetatable(_G[name] or {}, {
                __index = function(_, key) missing(name .. "." .. tostring(key)) end,
                __call = function() missing(name) end,
              })
            end
            for _, name in ipairs({ \(functions) }) do
              _G[name] = function() missing(name) end
            end
            function undo() error(\(Self.luaString(Self.undoRefusal)), 2) end
            """, chunkName: "=(opsh)")
    }

    /// `text` as a Lua string literal.
    static func luaString(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}

extension PostgresSession: WatchHost {
    var openTransactionForWait: String? {
        database.isInTransaction ? "the open transaction (a db.transaction, or a shell chunk on PostgreSQL)" : nil
    }

    /// Nothing to end: each statement reads the latest commits.
    public func releaseReadSnapshot() {}

    func tablesRead(by sql: String, arguments: QueryArguments) throws -> Set<String> {
        switch arguments {
        case let .positional(values): try database.tablesRead(by: sql, .positional(values))
        case let .named(values): try database.tablesRead(by: sql, .table(positional: [], named: values))
        }
    }

    func observe(_ tables: Set<String>, onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable {
        try listener.observe(tables, onChange: onChange)
    }

    /// Runs the events queued for the Lua thread (watch callbacks).
    @discardableResult
    public func deliverEvents() throws -> [LuaError] {
        try subscriptions.deliver()
    }
}

extension PostgresSession: MigrationHost {
    public var isSandboxed: Bool { sandbox }
    var isReadOnly: Bool { database.options.readOnly }
    var openTransactionForMigration: String? { database.transactionRefusingMigrations }

    func migrationStatus(_ external: [ExternalMigration]) throws -> [ExternalMigrations.Status] {
        try ExternalMigrations.status(database, external: external)
    }

    func migrate(_ external: [ExternalMigration], upTo target: String?) throws -> [String] {
        try database.migrate(external: external, upTo: target)
    }

    /// The session's connection is the one migrating: the body runs as it is.
    func runMigration(on migrating: StoreDatabase?, _ body: () throws -> Void) throws {
        try body()
    }
}
