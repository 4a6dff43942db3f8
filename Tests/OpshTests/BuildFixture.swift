import Foundation
import Testing

/// A database on one engine with a project on a git repository (tag
/// 1.0.0), for the tests of what builds may do (the issue "Every hole
/// found by attack", "Builds and git"): schemes and queued builds are
/// written with SQL from another process (what the backend does), builds
/// are started by `opsh -e` (`jobs.*`) or by an `opsh runner`, and every
/// build checks out under ``workspaces``.
final class BuildFixture: @unchecked Sendable {
    let folder: Sandbox
    let database: TestDatabase
    var engine: Engine { database.engine }
    var root: String { folder.root }
    /// The project's repository.
    var repository: String { root + "/repo" }
    /// Where every build of the fixture checks out.
    var workspaces: String { root + "/ws" }

    init(_ engine: Engine) throws {
        folder = try Sandbox()
        database = try folder.createdDatabase(engine)
        try sh("""
            git init -q -b main '\(repository)' && cd '\(repository)'
            echo 1.0.0 > version.txt && git add version.txt && git commit -q -m 'release 1.0.0' && git tag 1.0.0
            """)
        try FileManager.default.createDirectory(atPath: workspaces, withIntermediateDirectories: true)
        try sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
            VALUES ('com.example.app', 'App', 'App', \(Self.literal(repository)), 0)
            """)
    }

    /// The shell on the fixture's database in a pty, with `jobs`
    /// configured to build under ``workspaces`` (grace 1 s), at a prompt.
    func promptWithJobs() throws -> PseudoTerminal {
        let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: folder.environment)
        terminal.expect("> ")
        terminal.send("jobs.configure{ workspaces = '\(workspaces)', grace = 1 }\r")
        terminal.expect("> ")
        return terminal
    }

    /// A scheme of `project` whose build command is `command`; its id.
    @discardableResult
    func scheme(_ name: String, _ command: String, project: String = "com.example.app") throws -> String {
        let id = UUID().uuidString
        try sql("""
            INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand)
            VALUES ('\(id)', \(Self.literal(project)), \(Self.literal(name)), \(Self.literal(command)))
            """)
        return id
    }

    /// A queued build of `scheme` at `version`, inserted as the backend
    /// does (nobody holds it); its id.
    @discardableResult
    func enqueue(_ scheme: String, id: String = UUID().uuidString, version: String = "1.0.0",
                 status: String = "queued") throws -> String {
        try sql("""
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt)
            VALUES (\(Self.literal(id)), '\(scheme)', \(Self.literal(version)),
                    (SELECT coalesce(max(buildNumber), 0) + 1 FROM builds WHERE schemeId = '\(scheme)'),
                    '\(status)', (SELECT coalesce(max(createdAt), 0) + 1 FROM builds))
            """)
        return id
    }

    /// `opsh -e` with `code` given `arguments` as `...`, and `jobs` set to
    /// check out under ``workspaces``.
    func lua(_ code: String, _ arguments: [String] = [], environment: [String: String] = [:],
             options: [String] = [], jobs: String = "") throws -> TestFolder.Result {
        let quoted = arguments.map(Self.luaLiteral).joined(separator: ", ")
        let prelude = "jobs.configure{ workspaces = \(Self.luaLiteral(workspaces)), grace = 1\(jobs.isEmpty ? "" : ", " + jobs) }\n"
        return try folder.opsh(options + ["-e", prelude + "local function body(...)\n\(code)\nend\nreturn body(\(quoted))"],
                               on: database, environment: environment)
    }

    /// `opsh runner` on the fixture's database, checking out under ``workspaces``.
    func startRunner(_ options: [String] = [], environment: [String: String] = [:]) throws -> ChildProcess {
        try ChildProcess.start(opshExecutable, ["runner", "--db", database.db, "--workspaces", workspaces,
                                                "--heartbeat", "0.3"] + options,
                               environment: folder.environment.merging(environment) { $1 })
    }

    /// Stops a runner (SIGTERM: it lets its builds finish) and collects what it said.
    func stop(_ runner: ChildProcess) -> TestFolder.Result {
        kill(runner.pid, SIGTERM)
        return runner.finish()
    }

    /// SQL from another process (sqlite3 or psql), its rows `|`-separated.
    @discardableResult
    func sql(_ text: String) throws -> String {
        try database.sql(text)
    }

    func status(_ build: String) throws -> String {
        try sql("SELECT status FROM builds WHERE id = \(Self.literal(build))")
    }

    /// Every log line of a build, in order.
    func log(_ build: String) throws -> String {
        let order = engine == .sqlite ? "createdAt, rowid" : "createdAt, id COLLATE \"C\""
        return try sql("SELECT content FROM buildLogs WHERE buildId = \(Self.literal(build)) ORDER BY \(order)")
    }

    /// Waits (up to `seconds`) until the build has ended; its status.
    func waitForEnd(_ build: String, seconds: Double = 40) throws -> String {
        _ = try waitUntil(seconds) { ["succeeded", "failed", "cancelled"].contains(try status(build)) }
        return try status(build)
    }

    /// `CREATE TRIGGER name AFTER UPDATE ON builds` running `body` (SQL
    /// using NEW), in the engine's own form (a PL/pgSQL function on
    /// PostgreSQL).
    func plantTrigger(_ name: String, on table: String = "builds", event: String = "AFTER UPDATE", _ body: String) throws {
        switch engine {
        case .sqlite:
            try sql("CREATE TRIGGER \(name) \(event) ON \(table) BEGIN \(body); END")
        case .postgresql:
            try sql("""
                CREATE FUNCTION \(name)_function() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \(body); RETURN NULL; END $$;
                CREATE TRIGGER \(name) \(event) ON \(table) FOR EACH ROW EXECUTE FUNCTION \(name)_function();
                """)
        }
    }

    static func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    static func luaLiteral(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
            .replacingOccurrences(of: "\n", with: "\\n") + "'"
    }
}
