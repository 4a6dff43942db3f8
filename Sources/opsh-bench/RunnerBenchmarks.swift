import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// BENCHMARKS.md, "Build runners": three `opsh runner` processes (the
/// release opsh) on one queue of trivial builds (`true`, after the fresh
/// checkout every build gets), on a throwaway PostgreSQL server
/// (`scripts/pg-server`) and on an SQLite file, round-robin, a fresh
/// database each round.
///
/// Each round: the runners start and go idle; a burst of `burst` builds is
/// queued in one go (throughput: builds from the first claim to the last
/// finish, and each build's wait from queued to claimed); once they are
/// done, `singles` builds are queued one at a time onto the idle runners,
/// at spacings that fall anywhere in their poll period (the claim latency of
/// a build that finds a runner free). Every time is read from the database:
/// `createdAt` (queued), `startDate` (claimed: written by the claim, before
/// the checkout) and `endDate`; on PostgreSQL all three are the server's
/// clock. No figure unless every build succeeded exactly once (one attempt,
/// one "build succeeded" line in its log), every runner took some of each
/// burst, and each runner stopped cleanly with no `problem:` line.
enum RunnerBenchmarks {
    static let runners = 3
    static let burst = Int(ProcessInfo.processInfo.environment["OPSH_BENCH_RUNNER_BURST"] ?? "") ?? 60
    static let singles = Int(ProcessInfo.processInfo.environment["OPSH_BENCH_RUNNER_SINGLES"] ?? "") ?? 10
    static let rounds = Int(ProcessInfo.processInfo.environment["OPSH_BENCH_RUNNER_ROUNDS"] ?? "") ?? 3
    /// Each runner's `--concurrency`: the cores of this machine.
    static let concurrency = 2
    /// opsh runner's default: an idle runner looks at the queue every
    /// min(1 s, heartbeat / 2) (QueueRunner.Configuration.idlePoll).
    static let heartbeat = 10.0
    static var idlePoll: Double { min(1, heartbeat / 2) }

    struct Failed: Error, CustomStringConvertible {
        var description: String
    }

    /// One round's figures on one engine.
    struct Round {
        var buildsPerSecond: Double
        /// Seconds from queued to claimed, burst builds and single builds.
        var burstWaits: [Double]
        var singleWaits: [Double]
        /// Burst builds each runner took.
        var perRunner: [Int]
    }

    final class Engine {
        let name: String
        /// Runs a statement (psql or sqlite3); its output, trimmed.
        let sql: (String) throws -> String
        /// Makes a fresh database with a project and a `true` scheme; its --db and the scheme's id.
        let prepare: (Int) throws -> (database: String, scheme: String)
        /// Queues `count` builds of the scheme in one go.
        let enqueue: (String, String, Int) throws -> Void
        var rounds: [Round] = []
        var failure: String?

        init(name: String, sql: @escaping (String) throws -> String, prepare: @escaping (Int) throws -> (database: String, scheme: String),
             enqueue: @escaping (String, String, Int) throws -> Void) {
            self.name = name
            self.sql = sql
            self.prepare = prepare
            self.enqueue = enqueue
        }
    }

    static func run(directory: String, repository: String, opshExecutable: String) throws -> String {
        let shell = PostgresBenchmarks.shell
        let folder = directory + "/runners"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // The project's repository: the runners check it out for every build.
        let git = folder + "/repo"
        let made = shell(["/bin/sh", "-c", """
            set -e
            git init -q -b main "$0" && cd "$0"
            echo 1.0.0 > version.txt && git add version.txt
            git -c user.name=Bench -c user.email=bench@example.com commit -q -m 1.0.0 && git tag 1.0.0
            """, git], folder)
        guard made.status == 0 else { throw Failed(description: "git: \(made.stderr)") }
        func literal(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }
        func checked(_ result: (status: Int32, stdout: String, stderr: String), _ what: String) throws -> String {
            guard result.status == 0 else { throw Failed(description: "\(what): \(PostgresBenchmarks.firstLine(result.stderr))") }
            return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        var engines: [Engine] = []
        var notes: [String] = []

        // PostgreSQL: a throwaway server, a database of its own each round.
        let serverFolder = "/tmp/opsh-brn-\(getpid())"
        let started = shell(["\(repository)/scripts/pg-server", "start", serverFolder], directory)
        let serverURL = started.stdout.split(separator: "\n").last.map(String.init) ?? ""
        var pgVersion = "?"
        if started.status == 0, serverURL.hasPrefix("postgresql://") {
            let psqlPath = shell(["sh", "-c", "ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1"], directory)
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let psql = psqlPath.isEmpty ? "psql" : psqlPath
            var current = serverURL
            let pgSQL: (String) throws -> String = { statement in
                try checked(shell([psql, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", current, "-c", statement], directory), "psql")
            }
            pgVersion = (try? pgSQL("SHOW server_version")).map { $0.split(separator: " ").first.map(String.init) ?? $0 } ?? "?"
            engines.append(Engine(name: "PostgreSQL \(pgVersion)", sql: { try pgSQL($0) }, prepare: { round in
                current = serverURL
                _ = try pgSQL("CREATE DATABASE opsh_runners_\(round)")
                current = serverURL.replacingOccurrences(of: "/opsh?", with: "/opsh_runners_\(round)?")
                _ = try checked(shell([opshExecutable, "--db", current, "--create", "-e", "return db.engine"], directory), "opsh --create")
                // As RunnerSandbox does on PostgreSQL: SQL, what the backend writes.
                _ = try pgSQL("""
                    INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
                    VALUES ('com.example.app', 'App', 'App', \(literal(git)), extract(epoch FROM now()))
                    """)
                let scheme = try pgSQL("""
                    INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand)
                    VALUES (gen_random_uuid()::text, 'com.example.app', 'Trivial', 'true') RETURNING id
                    """)
                return (current, scheme)
            }, enqueue: { _, scheme, count in
                // What the backend does: queued rows, one statement; createdAt on the server's clock.
                _ = try pgSQL("""
                    INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt)
                    SELECT gen_random_uuid()::text, \(literal(scheme)), '1.0.0',
                           (SELECT coalesce(max(buildNumber), 0) FROM builds WHERE schemeId = \(literal(scheme))) + n,
                           'queued', extract(epoch FROM clock_timestamp())
                    FROM generate_series(1, \(count)) AS n
                    """)
            }))
        } else {
            notes.append("PostgreSQL not run: scripts/pg-server could not start a server (\(PostgresBenchmarks.firstLine(started.stderr))).")
        }
        defer { if started.status == 0 { _ = shell(["\(repository)/scripts/pg-server", "stop", serverFolder], directory) } }

        // SQLite: a file of its own each round, set up and queued through opsh (jobs.enqueue).
        var sqliteFile = ""
        engines.append(Engine(name: "SQLite", sql: { statement in
            try checked(shell(["sqlite3", "-cmd", ".timeout 5000", sqliteFile, statement], directory), "sqlite3")
        }, prepare: { round in
            let roundFolder = folder + "/sqlite-\(round)"
            try FileManager.default.createDirectory(atPath: roundFolder, withIntermediateDirectories: true)
            sqliteFile = roundFolder + "/backend.sqlite"
            let scheme = try checked(shell([opshExecutable, "--db", sqliteFile, "--create", "-e", """
                local repository = \(luaLiteral(git))
                projects.insert{ bundleIdentifier = 'com.example.app', name = 'App', gitRepositoryURL = repository }
                return schemes.insert{ projectBundleIdentifier = 'com.example.app', name = 'Trivial', buildCommand = 'true' }.id
                """], directory), "opsh --create")
            return (sqliteFile, scheme)
        }, enqueue: { database, scheme, count in
            _ = try checked(shell([opshExecutable, "--db", database, "-e",
                                   "for i = 1, \(count) do jobs.enqueue{ scheme = \(luaLiteral(scheme)), version = '1.0.0' } end"],
                                  directory), "jobs.enqueue")
        }))

        for round in 0..<rounds {
            for engine in engines where engine.failure == nil {
                do {
                    engine.rounds.append(try runRound(engine, round: round, folder: folder, opshExecutable: opshExecutable))
                } catch {
                    engine.failure = "\(error)"
                }
            }
        }

        var lines = [
            "### Build runners",
            "",
            "Three `opsh runner` processes (release build, `--concurrency \(concurrency)`, the default heartbeat of \(Int(heartbeat)) s) on one queue "
                + "of trivial builds (scheme command `true`, after the fresh `git` checkout of a one-file repository every build gets), "
                + "on a throwaway PostgreSQL \(pgVersion) server (`scripts/pg-server`: Unix socket, fsync off) and on an SQLite file (WAL), "
                + "all on this machine; a fresh database each round, \(rounds) rounds taken round-robin. Each round the runners start and go idle; "
                + "**burst**: \(burst) builds queued at once (one INSERT on PostgreSQL, as the backend would; \(burst) `jobs.enqueue` calls "
                + "in one `opsh -e` on SQLite), builds/s counted from the first claim to the last finish (median of the rounds); "
                + "then **idle**: \(singles) builds queued one at a time onto the idle runners, each once the previous finished and "
                + "after a pause that falls anywhere in their poll period. Latency = `startDate − createdAt` (queued → claimed; the claim "
                + "writes `startDate` before the checkout), read from the database: on PostgreSQL both on the server's clock, on SQLite "
                + "on this machine's (the enqueueing opsh's and the runner's). Pooled over the rounds; a burst build's wait is the "
                + "idle runners' next look at the queue plus the builds ahead of it, the idle figure is the claim latency itself. Every build succeeded exactly once (attempts = 1, "
                + "one `build succeeded` line in its log), every runner took some of each burst, and every runner stopped cleanly "
                + "(SIGTERM, exit 0, no `problem:` line), or the row has no figure.",
            "",
            "| engine | burst: builds/s | burst: queued → claimed, median / worst | idle: queued → claimed, median / worst | burst builds per runner, each round |",
            "| --- | --- | --- | --- | --- |",
        ]
        for engine in engines {
            guard engine.failure == nil, !engine.rounds.isEmpty else {
                lines.append("| \(engine.name) | — | not measured: \(PostgresBenchmarks.firstLine(engine.failure ?? "no round ran")) | | |")
                continue
            }
            let rate = Distribution(engine.rounds.map(\.buildsPerSecond)).median
            let burstWaits = Distribution(engine.rounds.flatMap(\.burstWaits))
            let singleWaits = Distribution(engine.rounds.flatMap(\.singleWaits))
            let split = engine.rounds.map { $0.perRunner.map(String.init).joined(separator: "/") }.joined(separator: ", ")
            lines.append("| \(engine.name) | \(String(format: "%.1f", rate)) "
                + "(rounds: \(engine.rounds.map { String(format: "%.1f", $0.buildsPerSecond) }.joined(separator: ", "))) | "
                + "\(formatDuration(burstWaits.median)) / \(formatDuration(burstWaits.samples.last ?? .nan)) (\(burstWaits.samples.count) builds) | "
                + "\(formatDuration(singleWaits.median)) / \(formatDuration(singleWaits.samples.last ?? .nan)) (\(singleWaits.samples.count) builds) | "
                + "\(split) |")
        }
        lines.append("")
        // Issue 25's targets for a build queued onto idle runners.
        var verdicts: [String] = []
        for engine in engines where engine.failure == nil && !engine.rounds.isEmpty {
            let waits = Distribution(engine.rounds.flatMap(\.singleWaits))
            let postgres = !engine.name.hasPrefix("SQLite")
            let met = postgres ? waits.median <= 0.05 && (waits.samples.last ?? .infinity) <= 0.2 : waits.median <= 0.15
            verdicts.append("\(engine.name): median \(formatDuration(waits.median)), worst \(formatDuration(waits.samples.last ?? .nan)) "
                + "against \(postgres ? "≤ 50 ms median, ≤ 200 ms worst" : "≤ 150 ms median"): \(met ? "met" : "not met")")
        }
        lines.append("An idle runner wakes when the database says `builds` changed (`BuildStore.watchQueue`: `PRAGMA data_version` "
            + "every 50 ms on SQLite, the schema's `opsh_changes` notifications on PostgreSQL); its idle poll "
            + "(\(formatDuration(idlePoll)), min(1 s, heartbeat / 2)) is the fallback. Idle claim latency, issue 25's targets: "
            + verdicts.joined(separator: "; ") + ".")
        lines.append(contentsOf: notes.map { "\n" + $0 })
        return "\n" + lines.joined(separator: "\n")
    }

    // MARK: - One round

    static func runRound(_ engine: Engine, round: Int, folder: String, opshExecutable: String) throws -> Round {
        let (database, scheme) = try engine.prepare(round)
        let roundFolder = folder + "/\(engine.name.hasPrefix("SQLite") ? "sqlite" : "pg")-run-\(round)"
        try FileManager.default.createDirectory(atPath: roundFolder, withIntermediateDirectories: true)
        var children: [Child] = []
        defer { for child in children { child.stop(signal: SIGKILL) } }
        for index in 0..<runners {
            children.append(try Child(opshExecutable, ["runner", "--db", database, "--concurrency", "\(concurrency)",
                                                       "--heartbeat", "\(Int(heartbeat))",
                                                       "--workspaces", roundFolder + "/workspaces-\(index)"],
                                      log: roundFolder + "/runner-\(index).log"))
        }
        // Up (each logged its start) and idle for a poll period.
        guard waitUntil(30, { children.allSatisfy { $0.log.contains("opsh runner: started:") } }) else {
            throw Failed(description: "the runners did not start: \(children.map { PostgresBenchmarks.firstLine($0.log) })")
        }
        Thread.sleep(forTimeInterval: idlePoll + 0.2)

        // The burst.
        try engine.enqueue(database, scheme, burst)
        guard waitUntil(120, { finishedCount(children) >= burst }) else {
            throw Failed(description: "the burst did not finish in 120 s: \(finishedCount(children)) of \(burst)")
        }
        let burstIds = try engine.sql("SELECT id FROM builds").split(separator: "\n").map(String.init)
        guard burstIds.count == burst else { throw Failed(description: "\(burstIds.count) builds after the burst, expected \(burst)") }

        // One at a time onto idle runners, at pauses spread over the poll period.
        for single in 0..<singles {
            let pause = idlePoll * (0.1 + (Double(single) * 0.618_034).truncatingRemainder(dividingBy: 1))
            Thread.sleep(forTimeInterval: pause)
            try engine.enqueue(database, scheme, 1)
            guard waitUntil(30, { finishedCount(children) >= burst + single + 1 }) else {
                throw Failed(description: "single build \(single + 1) did not finish in 30 s")
            }
        }

        for child in children { kill(child.pid, SIGTERM) }
        for (index, child) in children.enumerated() {
            let status = child.wait(timeout: 30)
            let log = child.log
            guard status == 0 else { throw Failed(description: "runner \(index) exited with \(status): \(lastLine(log))") }
            if let problem = log.split(separator: "\n").first(where: { $0.contains("problem:") }) {
                throw Failed(description: "runner \(index): \(problem)")
            }
        }

        // The checks behind the figures, from the database.
        let total = burst + singles
        let good = try engine.sql("""
            SELECT count(*) FROM builds b WHERE status = 'succeeded' AND attempts = 1 AND startDate IS NOT NULL AND endDate >= startDate
              AND (SELECT count(*) FROM buildLogs l WHERE l.buildId = b.id AND l.content LIKE 'build succeeded (exit code 0)%') = 1
            """)
        let all = try engine.sql("SELECT count(*) FROM builds")
        guard good == "\(total)", all == "\(total)" else {
            let statuses = try engine.sql("SELECT status, attempts, count(*) FROM builds GROUP BY status, attempts")
            throw Failed(description: "\(good) of \(all) builds succeeded exactly once (expected \(total)): \(statuses.replacingOccurrences(of: "\n", with: "; "))")
        }
        let idList = burstIds.map { "'\($0)'" }.joined(separator: ",")
        let pids = try engine.sql("SELECT runnerPid, count(*) FROM builds WHERE id IN (\(idList)) GROUP BY runnerPid")
        var perPid: [String: Int] = [:]
        for line in pids.split(separator: "\n") {
            let fields = line.split(separator: "|")
            if fields.count == 2 { perPid[String(fields[0])] = Int(fields[1]) }
        }
        let perRunner = children.map { perPid[String($0.pid)] ?? 0 }
        guard perRunner.allSatisfy({ $0 > 0 }), perRunner.reduce(0, +) == burst else {
            throw Failed(description: "burst builds per runner \(perRunner) (by runnerPid: \(pids.replacingOccurrences(of: "\n", with: "; ")))")
        }

        func numbers(_ statement: String) throws -> [Double] {
            try engine.sql(statement).split(separator: "\n").compactMap { Double($0) }
        }
        let span = try numbers("SELECT max(endDate) - min(startDate) FROM builds WHERE id IN (\(idList))")
        guard let seconds = span.first, seconds > 0 else { throw Failed(description: "no span for the burst") }
        let burstWaits = try numbers("SELECT startDate - createdAt FROM builds WHERE id IN (\(idList))")
        let singleWaits = try numbers("SELECT startDate - createdAt FROM builds WHERE id NOT IN (\(idList))")
        guard burstWaits.count == burst, singleWaits.count == singles, (burstWaits + singleWaits).allSatisfy({ $0 >= 0 }) else {
            throw Failed(description: "unexpected waits: \(burstWaits.count) burst, \(singleWaits.count) single, min \((burstWaits + singleWaits).min() ?? .nan)")
        }
        return Round(buildsPerSecond: Double(burst) / seconds, burstWaits: burstWaits, singleWaits: singleWaits, perRunner: perRunner)
    }

    /// A string as a Lua literal (`opsh -e` takes no arguments).
    static func luaLiteral(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
            .replacingOccurrences(of: "\n", with: "\\n") + "'"
    }

    /// Builds the runners said they finished (one line each).
    static func finishedCount(_ children: [Child]) -> Int {
        children.reduce(0) { count, child in
            count + child.log.split(separator: "\n").filter {
                $0.contains(") succeeded (") || $0.contains(") failed") || $0.contains(") cancelled")
            }.count
        }
    }

    static func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = now() + seconds
        while now() < deadline {
            if condition() { return true }
            usleep(20_000)
        }
        return condition()
    }

    static func lastLine(_ text: String) -> String {
        PostgresBenchmarks.firstLine(text.split(separator: "\n").last.map(String.init) ?? "")
    }

    /// A process with stdin from /dev/null and stdout and stderr to a file.
    final class Child {
        let pid: pid_t
        let logPath: String
        private var exited = false

        init(_ executable: String, _ arguments: [String], log: String) throws {
            logPath = log
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
            let argv = ([executable] + arguments).map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            var child: pid_t = 0
            let status = posix_spawn(&child, executable, &actions, nil, argv, environ)
            guard status == 0 else { throw Failed(description: "cannot start \(executable): \(String(cString: strerror(status)))") }
            pid = child
        }

        var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

        /// The exit status (128 + signal when killed; -1 when it did not end in time).
        func wait(timeout: Double) -> Int32 {
            let deadline = now() + timeout
            var status: Int32 = 0
            while now() < deadline {
                let done = waitpid(pid, &status, WNOHANG)
                if done == pid {
                    exited = true
                    return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
                }
                if done < 0 { exited = true; return -1 }
                usleep(20_000)
            }
            return -1
        }

        func stop(signal: Int32) {
            guard !exited else { return }
            kill(pid, signal)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            exited = true
        }
    }
}
