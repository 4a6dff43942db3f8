import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A database with a project on a git repository (tag 1.0.0), and `opsh
/// runner` processes on it (README, "Build runners"): an SQLite file
/// (RunnerTests), or a database of its own on the tests' PostgreSQL server
/// (PostgresRunnerTests). The same helpers on both, read from another
/// process (sqlite3, psql).
final class RunnerSandbox: @unchecked Sendable {
    enum Engine {
        case sqlite
        /// The server and this fixture's database on it.
        case postgres(PostgresServer, url: String)
    }

    let sandbox: Sandbox
    let engine: Engine
    var root: String { sandbox.root }
    /// Where the test's build commands append `$OPSH_BUILD_ID`.
    var ranFile: String { root + "/ran.txt" }
    /// What `--db` names.
    var database: String {
        switch engine {
        case .sqlite: sandbox.database
        case let .postgres(_, url): url
        }
    }

    /// On `server` (PostgreSQL), if given; else the tests' shared server
    /// when `postgres`, or SQLite.
    init(postgres: Bool = false, on server: PostgresServer? = nil) throws {
        sandbox = try Sandbox()
        let repository = sandbox.root + "/repo"
        if postgres || server != nil {
            let server = try server ?? PostgresServer.shared()
            let url = try server.makeDatabase()
            engine = .postgres(server, url: url)
            let created = try sandbox.opsh(["--db", url, "--create", "-e", "return db.engine"], database: false)
            #expect(created.status == 0, "\(created.stderr)")
        } else {
            engine = .sqlite
            try sandbox.createDatabase()
        }
        let made = try sandbox.run("/bin/sh", ["-c", """
            set -e
            git init -q -b main "$0" && cd "$0"
            echo 1.0.0 > version.txt && git add version.txt
            git -c user.name=Test -c user.email=test@example.com commit -q -m 1.0.0 && git tag 1.0.0
            """, repository])
        #expect(made.status == 0, "git: \(made.stderr)")
        switch engine {
        case .sqlite:
            try lua("projects.insert{ bundleIdentifier = 'com.example.app', name = 'App', gitRepositoryURL = ... }", [repository])
        case .postgres:
            // The repositories on PostgreSQL are not this fixture's to use yet: SQL.
            _ = try sql("""
                INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
                VALUES ('com.example.app', 'App', 'App', \(Self.literal(repository)), extract(epoch FROM now()))
                """)
        }
    }

    /// Runs Lua through `opsh -e` with `arguments` in `...`; its output lines.
    @discardableResult
    func lua(_ code: String, _ arguments: [String] = []) throws -> [String] {
        let quoted = arguments.map { argument in
            "'" + argument.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
                .replacingOccurrences(of: "\n", with: "\\n") + "'"
        }.joined(separator: ", ")
        let result = try sandbox.opsh(["--db", database, "-e", "local function body(...) \(code) end return body(\(quoted))"],
                                      database: false)
        #expect(result.status == 0, "\(code): \(result.stderr)")
        return result.stdout.split(separator: "\n").map(String.init)
    }

    /// A scheme whose build command is `command`; its id.
    func scheme(_ name: String, _ command: String) throws -> String {
        switch engine {
        case .sqlite:
            return try lua("return schemes.insert{ projectBundleIdentifier = 'com.example.app', name = ..., buildCommand = select(2, ...) }.id",
                           [name, command]).first ?? ""
        case .postgres:
            return try sql("""
                INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand)
                VALUES (gen_random_uuid()::text, 'com.example.app', \(Self.literal(name)), \(Self.literal(command))) RETURNING id
                """)
        }
    }

    /// Queues `count` builds of `scheme` for the runners (with the
    /// scheme's next build numbers, oldest first); their ids.
    func enqueue(_ scheme: String, count: Int = 1) throws -> [String] {
        switch engine {
        case .sqlite:
            return try lua("for i = 1, \(count) do print(jobs.enqueue{ scheme = ..., version = '1.0.0' }.id) end", [scheme])
        case .postgres:
            // What the backend (or builds.create) does: a queued row.
            return try sql("""
                INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt)
                SELECT gen_random_uuid()::text, \(Self.literal(scheme)), '1.0.0',
                       (SELECT coalesce(max(buildNumber), 0) FROM builds WHERE schemeId = \(Self.literal(scheme))) + n,
                       'queued', extract(epoch FROM clock_timestamp()) + n * 0.000001
                FROM generate_series(1, \(count)) AS n ORDER BY n RETURNING id
                """).split(separator: "\n").map(String.init)
        }
    }

    /// `opsh runner --db DATABASE options`; on `host` of `hosts`, over
    /// TCP to the server's address on that host's network (PostgreSQL only).
    func startRunner(_ options: [String], on host: RunnerHosts.Host? = nil, of hosts: RunnerHosts? = nil) throws -> ChildProcess {
        guard let host, let hosts else {
            return try sandbox.start(opshExecutable, ["runner", "--db", database] + options)
        }
        guard case let .postgres(server, url) = engine else { throw RunnerHosts.HostsError(message: "separate hosts are for PostgreSQL") }
        let database = server.tcpURL(of: PostgresServer.databaseName(of: url), at: host.serverAddress)
        let command = hosts.command(on: host, opshExecutable, ["runner", "--db", database] + options)
        return try sandbox.start(command.executable, command.arguments)
    }

    /// A statement from another process, its rows `|`-separated: the
    /// sqlite3 CLI (waiting up to 5 s for a lock as any reader beside the
    /// runners would: even in WAL mode a reader can meet SQLITE_BUSY for a
    /// moment while another connection sets the WAL up or recovers it; the
    /// CLI's own default is not to wait at all), or psql.
    func sql(_ statement: String) throws -> String {
        switch engine {
        case .sqlite:
            let result = try sandbox.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", sandbox.database, statement])
            #expect(result.status == 0, "sqlite3 failed: \(result.stderr)")
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        case let .postgres(server, url):
            return try server.sql(statement, url: url)
        }
    }

    /// A string as an SQL literal.
    static func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// The ids the build commands appended, in order.
    func ranIds() -> [String] {
        ((try? String(contentsOfFile: ranFile, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Runner A starts a long build and is SIGKILLed; runner B takes the
    /// build back within a few heartbeats, saying why in the build's log.
    /// With `hosts`, A runs on its first host and B on its second.
    func killARunnerMidBuild(maxAttempts: Int, hosts: RunnerHosts? = nil) throws -> (build: String, killed: ChildProcess,
                                                                                   taker: ChildProcess, tookBackIn: Double) {
        let attempts = root + "/attempts.txt"
        // The first attempt sleeps (its pid, which leads its process group, is recorded); a second ends at once.
        let scheme = try scheme("Long", """
            echo "$$ $PWD" >> '\(attempts)'
            if [ "$(wc -l < '\(attempts)')" -eq 1 ]; then echo started; exec sleep 50; fi
            echo second attempt
            """)
        let build = try #require(try enqueue(scheme).first)
        let heartbeat = 0.4
        let killed = try startRunner(["--heartbeat", "\(heartbeat)"], on: hosts?[0], of: hosts)
        let started = try waitUntil(20) {
            try sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'started'") == "1"
        }
        #expect(started, "the build never logged 'started'")
        // Quiet: it says only its take-backs (and problems).
        let taker = try startRunner(["--heartbeat", "\(heartbeat)", "--max-attempts", "\(maxAttempts)", "--quiet"],
                                    on: hosts?[1], of: hosts)
        // B is up (it logged its start) before A dies: B must not have claimed the running build.
        #expect(try sql("SELECT runnerPid FROM builds WHERE id = '\(build)'") == "\(killed.pid)")
        kill(killed.pid, SIGKILL)
        let killedAt = Date()
        let tookBack = try waitUntil(20) {
            try sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'") == "1"
        }
        let tookBackIn = Date().timeIntervalSince(killedAt)
        #expect(tookBack, "no runner took the build back")
        // The killed runner's build command is still there (a SIGKILL cannot stop it): end it.
        if let first = (try? String(contentsOfFile: attempts, encoding: .utf8))?.split(separator: "\n").first,
           let pid = first.split(separator: " ").first.flatMap({ pid_t($0) }) {
            kill(-pid, SIGKILL)
        }
        return (build, killed, taker, tookBackIn)
    }
}
