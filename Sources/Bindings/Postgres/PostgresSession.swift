import CLuaShim
import Foundation
import LuaRuntime
import Store

/// One Lua state wired to a PostgreSQL database (`--db postgresql://…`):
/// what `opsh run` and `opsh -e` run a script in there.
///
/// The `db` module runs on PostgreSQL with the same API as on SQLite
/// (``PostgresDatabaseModule``); `json` and `help` are there too. The
/// modules built on SQLite's session — the repositories, query keys,
/// `watch`, `jobs`, `migrate`, maintenance, export and import, analytics,
/// audit — are not yet on PostgreSQL: each of them raises an error saying
/// so, rather than running on another database.
public final class PostgresSession {
    public let runtime: LuaRuntime
    public let database: PostgresDatabase
    let markers: SQLMarkers
    let rowShapes: RowShapes

    /// The modules a PostgreSQL session does not have yet.
    public static let missingModules = [
        "projects", "schemes", "builds", "logs", "crashes", "models", "sessions", "telemetry", "config",
        "key", "query", "watch", "jobs", "migrate", "git", "analytics", "export", "audit", "opsh",
    ]
    public static let missingFunctions = ["backup", "check", "stats", "vacuum", "import", "undo"]

    public init(database: PostgresDatabase, sandbox: Bool = false, memoryLimit: Int? = nil) throws {
        self.database = database
        runtime = try LuaRuntime(options: .init(sandbox: sandbox))
        runtime.register(module: "db", [:])
        runtime.stack.pushGlobal("db")
        markers = SQLMarkers.install(in: runtime.state)
        runtime.stack.pop()
        rowShapes = RowShapes(runtime: runtime)
        // Ctrl-C, a timeout or SIGTERM cancel the statement on the server.
        let canceller = database.canceller
        runtime.onInterrupt { _ in try? canceller.cancel() }
        PostgresDatabaseModule.install(in: self)
        JSONModule.install(runtime: runtime, markers: markers)
        HelpModule.install(runtime: runtime)
        try refuseMissingModules()
        if let memoryLimit { runtime.setMemoryLimit(memoryLimit) }
    }

    private func refuseMissingModules() throws {
        let modules = Self.missingModules.map { "\"\($0)\"" }.joined(separator: ", ")
        let functions = Self.missingFunctions.map { "\"\($0)\"" }.joined(separator: ", ")
        try runtime.execute("""
            local function missing(name)
              error(name .. " is not available on PostgreSQL yet: use db.query, db.exec and db.transaction", 3)
            end
            for _, name in ipairs({ \(modules) }) do
              _G[name] = setmetatable({}, {
                __index = function(_, key) missing(name .. "." .. tostring(key)) end,
                __call = function() missing(name) end,
              })
            end
            for _, name in ipairs({ \(functions) }) do
              _G[name] = function() missing(name) end
            end
            """, chunkName: "=(opsh)")
    }
}
