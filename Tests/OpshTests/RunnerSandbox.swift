import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A database with a project on a git repository (tag 1.0.0), and `opsh
/// runner` processes on it (README, "Build runners"), on either engine:
/// an SQLite file, or a database of its own on the tests' PostgreSQL server
/// (or on a server of a test's own, RunnerHosts). Read from another
/// process (sqlite3, psql).
final class RunnerSandbox: @unchecked Sendable {
    let sandbox: Sandbox
    let database: TestDatabase
    /// The server of a test's own that `database` is on (RunnerHosts), if any.
    let server: PostgresServer?
    var engine: Engine { database.engine }
    var root: String { sandbox.root }
    /// Where the test's build commands append `$OPSH_BUILD_ID`.
    var ranFile: String { root + "/ran.txt" }

    /// On `engine`; on `server` (PostgreSQL), a server of the test's own.
    init(_ engine: Engine = .sqlite, on server: PostgresServer? = nil) throws {
        sandbox = try Sandbox()
        self.server = server
        if let server {
            database = TestDatabase(engine: .postgresql, db: try server.makeDatabase())
            let created = try sandbox.opsh(["--create", "-e", "return db.engine"], on: database)
            #expect(created.status == 0, "\(created.stderr)")
        } else {
            database = try sandbox.createdDatabase(engine)
        }
        let repository = sandbox.root + "/repo"
        let made = try sandbox.run("/bin/sh", ["-c", """
            set -e
            git init -q -b main "$0" && cd "$0"
            echo 1.0.0 > version.txt && git add version.txt
            git -c user.name=Test -c user.email=test@example.com commit -q -m 1.0.0 && git tag 1.0.0
            """, repository])
        #expect(made.status == 0, "git: \(made.stderr)")
        try lua("projects.insert{ bundleIdentifier = 'com.example.app', name = 'App', gitRepositoryURL = ... }", [repository])
    }

    /// Runs Lua through `opsh -e` with `arguments` in `...`; its output lines.
    @discardableResult
    func lua(_ code: String, _ arguments: [String] = []) throws -> [String] {
        let quoted = arguments.map { argument in
            "'" + argument.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
                .replacingOccurrences(of: "\n", with: "\\n") + "'"
        }.joined(separator: ", ")
        let result = try sandbox.opsh(["-e", "local function body(...) \(code) end return body(\(quoted))"], on: database)
        #expect(result.status == 0, "\(code): \(result.stderr)")
        return result.stdout.split(separator: "\n").map(String.init)
    }

    /// A scheme whose build command is `command`; its id.
    func scheme(_ name: String, _ command: String) throws -> String {
        try lua("return schemes.insert{ projectBundleIdentifier = 'com.example.app', name = ..., buildCommand = select(2, ...) }.id",
                [name, command]).first ?? ""
    }

    /// Queues `count` builds of `scheme` for the runners (with the
    /// scheme's next build numbers, oldest first); their ids.
    func enqueue(_ scheme: String, count: Int = 1) throws -> [String] {
        try lua("for i = 1, \(count) do print(jobs.enqueue{ scheme = ..., version = '1.0.0' }.id) end", [scheme])
    }

    /// `opsh runner --db DATABASE options`; on `host` of `hosts`, over
    /// TCP to the server's address on that host's network (PostgreSQL only).
    func startRunner(_ options: [String], on host: RunnerHosts.Host? = nil, of hosts: RunnerHosts? = nil) throws -> ChildProcess {
        guard let host, let hosts else {
            return try sandbox.start(opshExecutable, ["runner", "--db", database.db] + options)
        }
        guard let server else { throw RunnerHosts.HostsError(message: "separate hosts are for a PostgreSQL server of the test's own") }
        let database = server.tcpURL(of: PostgresServer.databaseName(of: self.database.db), at: host.serverAddress)
        let command = hosts.command(on: host, opshExecutable, ["runner", "--db", database] + options)
        return try sandbox.start(command.executable, command.arguments)
    }

    /// A statement from another process (sqlite3, psql: ``TestDatabase/sql(_:)``),
    /// its rows one a line, `|`-separated.
    func sql(_ statement: String) throws -> String {
        try database.sql(statement)
    }

    /// Waits (a minute at most) until `count` builds succeeded, runs
    /// `meanwhile`, then stops `runners` (SIGTERM: they let their builds
    /// finish) and checks each ended well (0, no problem said); what they said.
    func stopOnceSucceeded(_ count: Int, _ runners: [ChildProcess], meanwhile: () throws -> Void = {},
                           sourceLocation: SourceLocation = #_sourceLocation) throws -> [TestFolder.Result] {
        let allDone = try waitUntil(60) { try sql("SELECT count(*) FROM builds WHERE status = 'succeeded'") == String(count) }
        try meanwhile()
        for runner in runners { kill(runner.pid, SIGTERM) }
        let results = runners.map { $0.finish() }
        let statuses = try sql("SELECT status, count(*) FROM builds GROUP BY status")
        #expect(allDone, "statuses: \(statuses)\n\(results.map(\.stderr).joined(separator: "\n"))", sourceLocation: sourceLocation)
        for result in results {
            #expect(result.status == 0, "\(result.stderr)", sourceLocation: sourceLocation)
            #expect(!result.stderr.contains("problem:"), "\(result.stderr)", sourceLocation: sourceLocation)
        }
        return results
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

extension RunnerSandbox {
    /// `1` when `column` is NULL, else `0`, on both engines (sqlite3 prints
    /// a boolean as 1/0, psql as t/f).
    static func isNull(_ column: String) -> String { "CASE WHEN \(column) IS NULL THEN 1 ELSE 0 END" }

    /// `1` when `column` is not NULL, else `0`.
    static func isNotNull(_ column: String) -> String { "CASE WHEN \(column) IS NULL THEN 0 ELSE 1 END" }

    /// The engine's clock now, in seconds since 1970 (PostgreSQL's is the server's).
    static func now(_ engine: Engine) -> String {
        engine == .sqlite ? "((julianday('now') - 2440587.5) * 86400.0)" : "extract(epoch FROM now())"
    }
}

/// The lines of a runner's stderr up to one containing `text` (read as
/// they come: a poll for what the runner says it has done), or all it said
/// once it exited.
func readStderr(of runner: ChildProcess, until text: String) -> String {
    var said = ""
    while !said.contains(text) {
        let line = readFirstLine(runner.standardError)
        if line.isEmpty { break }
        said += String(decoding: line, as: UTF8.self)
    }
    return said
}
