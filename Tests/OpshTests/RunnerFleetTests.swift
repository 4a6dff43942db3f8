import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Running a fleet of runners (README, "Build runners"; docs/runners.md,
/// "Under systemd"): `opsh runners` lists them from the database, idle ones
/// included; under a `Type=notify` unit a runner says READY=1, WATCHDOG=1
/// only after a heartbeat the database took, and STOPPING=1; every line it
/// prints has its time, and a problem the `problem:` prefix.
@Suite struct RunnerFleetTests {
    /// `opsh runners --json [--all]`: the runners, as objects.
    func listed(_ fixture: RunnerSandbox, all: Bool = false) throws -> [[String: Any]] {
        let result = try fixture.sandbox.opsh(["runners", "--json"] + (all ? ["--all"] : []), on: fixture.database)
        #expect(result.status == 0, "\(result.stderr)")
        let parsed = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]]
        return parsed ?? []
    }

    func runner(_ pid: pid_t, in list: [[String: Any]]) -> [String: Any]? {
        list.first { ($0["pid"] as? Int) == Int(pid) }
    }

    @Test(arguments: Engine.allCases) func runnersListsIdleAndBusyRunnersThenTheStoppedAndTheLostOnes(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let go = fixture.root + "/go"
        let scheme = try fixture.scheme("Wait", "while [ ! -e '\(go)' ]; do sleep 0.05; done")
        let none = try fixture.sandbox.opsh(["runners"], on: fixture.database)
        #expect(none.status == 0 && none.stdout.contains("(0 rows)"), "\(none.stdout)\(none.stderr)")
        #expect(none.stderr.contains("no runner is live; `opsh runners --all` lists the ones that stopped or were lost"), "\(none.stderr)")

        // One runner idle (it holds no build: invisible in `builds`), one holding a build.
        let idle = try fixture.startRunner(["--heartbeat", "0.3", "--concurrency", "3"])
        #expect(try waitUntil(30) { runner(idle.pid, in: try listed(fixture)) != nil }, "the idle runner was never listed")
        let busy = try fixture.startRunner(["--heartbeat", "0.3", "--concurrency", "1", "--scheme", "Wait"])
        let build = try fixture.enqueue(scheme)[0]
        #expect(try waitUntil(30) { try fixture.sql("SELECT runnerPid FROM builds WHERE id = '\(build)' AND status = 'running'") != "" })
        // The idle runner may have claimed it: whoever holds it holds 1.
        let holder = pid_t(try fixture.sql("SELECT runnerPid FROM builds WHERE id = '\(build)'")) ?? 0
        let live = try listed(fixture)
        #expect(live.count == 2, "\(live)")
        let version = try fixture.sql("SELECT version FROM opsh_audit LIMIT 1")
        for child in [idle, busy] {
            let entry = runner(child.pid, in: live)
            #expect(entry?["host"] as? String == hostName(), "\(live)")
            #expect(entry?["state"] as? String == "live", "\(live)")
            #expect(entry?["version"] as? String == version, "the audit trail's version is \(version): \(live)")
            #expect(entry?["buildsHeld"] as? Int == (child.pid == holder ? 1 : 0), "\(live)")
            #expect((entry?["heartbeatAt"] as? Double ?? 0) >= (entry?["startedAt"] as? Double ?? 1), "\(live)")
        }
        #expect(runner(busy.pid, in: live)?["schemes"] as? [String] == ["Wait"], "\(live)")
        #expect(runner(busy.pid, in: live)?["concurrency"] as? Int == 1, "\(live)")
        #expect(runner(idle.pid, in: live)?["schemes"] is NSNull, "\(live)")
        // The table: host, pid, start, builds held of its concurrency, heartbeat, version.
        let table = try fixture.sandbox.opsh(["runners"], on: fixture.database)
        #expect(table.status == 0)
        #expect(table.stdout.contains("| host ") && table.stdout.contains("| started (UTC) ") && table.stdout.contains("| heartbeat ")
                && table.stdout.contains("| version ") && table.stdout.contains("(2 rows)"), "\(table.stdout)")
        #expect(table.stdout.contains(" 1 of \(holder == busy.pid ? 1 : 3) "), "\(table.stdout)")
        #expect(table.stdout.contains("s ago (every 0.3 s)"), "\(table.stdout)")

        // Killed: lost after three missed heartbeats, by the database's clock.
        kill(idle.pid, SIGKILL)
        _ = idle.finish()
        #expect(try waitUntil(30) { runner(idle.pid, in: try listed(fixture)) == nil }, "a killed runner is still listed live")
        // Stopped cleanly: marked so at once.
        FileManager.default.createFile(atPath: go, contents: nil)
        #expect(try waitUntil(30) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" })
        kill(busy.pid, SIGTERM)
        let stopped = busy.finish()
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(try listed(fixture).isEmpty)
        let all = try listed(fixture, all: true)
        #expect(runner(idle.pid, in: all)?["state"] as? String == "lost", "\(all)")
        #expect(runner(busy.pid, in: all)?["state"] as? String == "stopped", "\(all)")
        #expect(runner(busy.pid, in: all)?["stoppedAt"] is Double, "\(all)")
        let allTable = try fixture.sandbox.opsh(["runners", "--all"], on: fixture.database)
        #expect(allTable.stdout.contains("| state ") && allTable.stdout.contains(" lost ") && allTable.stdout.contains(" stopped 20"), "\(allTable.stdout)")
    }

    @Test(arguments: Engine.allCases) func withoutTheMigrationRunnersSaysToRunOpshMigrateAndARunnerStillRuns(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let migrations = engine == .sqlite ? "grdb_migrations" : "opsh_migrations"
        _ = try fixture.sql("DELETE FROM \(migrations) WHERE identifier IN ('007_runnerRegistry', '008_pinnedFunctions'); DROP TABLE opsh_runners;")
        let refused = try fixture.sandbox.opsh(["runners"], on: fixture.database)
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(refused.stderr.contains("this database does not record its runners yet (migration 007_runnerRegistry is pending): run `opsh migrate`"), "\(refused.stderr)")

        // A runner of this opsh on it still claims and runs, and says why it is not listed.
        let scheme = try fixture.scheme("Append", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'")
        let runner = try fixture.startRunner(["--heartbeat", "0.3"])
        _ = try fixture.enqueue(scheme)
        let results = try fixture.stopOnceSucceeded(1, [runner])
        #expect(results[0].stderr.contains("opsh runner: this database lacks migration 007_runnerRegistry: `opsh runners` does not list this runner until `opsh migrate` applies it"), "\(results[0].stderr)")

        let migrated = try fixture.sandbox.opsh(["migrate"], on: fixture.database)
        #expect(migrated.status == 0, "\(migrated.stderr)")
        let listed = try fixture.sandbox.opsh(["runners", "--all"], on: fixture.database)
        #expect(listed.status == 0 && listed.stdout.contains("(0 rows)"), "\(listed.stdout)\(listed.stderr)")
    }

    @Test(arguments: Engine.allCases) func aRunnerOnADatabaseWithoutOpshsSchemaNamesOpshMigrate(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let empty = try TestDatabase.empty(engine, in: sandbox.root)
        let refused = try sandbox.opsh(["runner"], on: empty)
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(refused.stderr.contains("opsh runner needs opsh's schema: make it with `opsh migrate --create`"), "\(refused.stderr)")
        // A runner's line like every other: its time, and a problem's prefix (the journal reads it so).
        #expect(refused.stderr.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ opsh runner: problem: (no database at|postgresql://.* has no opsh schema)"#,
                                     options: .regularExpression) != nil, "\(refused.stderr)")
        #expect(!refused.stderr.contains("pass --create"), "opsh runner takes no --create: \(refused.stderr)")
        // What it says to run makes a database a runner runs on.
        let made = try sandbox.opsh(["migrate", "--create"], on: empty)
        #expect(made.status == 0, "\(made.stderr)")
        let runner = try sandbox.start(opshExecutable, ["runner", "--db", empty.db, "--heartbeat", "0.2"])
        let line = String(decoding: readFirstLine(runner.standardError), as: UTF8.self)
        #expect(try waitUntil(30) { try empty.sql("SELECT count(*) FROM opsh_runners WHERE pid = \(runner.pid)") == "1" })
        kill(runner.pid, SIGTERM)
        let stopped = runner.finish()
        #expect(line.contains("opsh runner: started: pid \(runner.pid)"), "\(line)\(stopped.stderr)")
        #expect(stopped.status == 0, "\(stopped.stderr)")
    }

    /// The units give the database in `OPSH_DB` from an EnvironmentFile=:
    /// no --db, so a password in the URL is in no process's arguments.
    @Test(arguments: Engine.allCases) func aRunnerTakesItsDatabaseFromOPSH_DBAsTheUnitGivesIt(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let scheme = try fixture.scheme("Append", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'")
        let runner = try fixture.sandbox.start(opshExecutable, ["runner", "--heartbeat", "0.3"],
                                               environment: fixture.sandbox.environment.merging(["OPSH_DB": fixture.database.db]) { $1 })
        let build = try fixture.enqueue(scheme)[0]
        #expect(try waitUntil(30) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" })
        let arguments = (try? String(contentsOfFile: "/proc/\(runner.pid)/cmdline", encoding: .utf8)) ?? ""
        #expect(try self.runner(runner.pid, in: listed(fixture)) != nil)
        kill(runner.pid, SIGTERM)
        let result = runner.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!arguments.isEmpty && !arguments.contains(fixture.database.db), "\(arguments)")
        #expect(try fixture.sql("SELECT runnerPid FROM builds WHERE id = '\(build)'") == String(runner.pid))
    }

    // MARK: - systemd

    @Test(arguments: Engine.allCases) func underATypeNotifyUnitTheRunnerSaysReadyThenWatchdogAtEachHeartbeatThenStopping(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        // A path on one engine, an abstract name (`@…`) on the other: both forms systemd uses.
        let notify = try NotifySocket(in: fixture.root, abstract: engine == .sqlite)
        let runner = try fixture.sandbox.start(opshExecutable, ["runner", "--db", fixture.database.db, "--heartbeat", "0.3"],
                                               environment: fixture.sandbox.environment.merging(["NOTIFY_SOCKET": notify.address]) { $1 })
        let ready = notify.waitFor(timeout: 30) { $0.contains("READY=1") }
        #expect(ready != nil, "no READY=1: \(notify.received)")
        // READY=1 once it is registered: listed by `opsh runners` from then on.
        #expect(try fixture.sql("SELECT count(*) FROM opsh_runners WHERE pid = \(runner.pid) AND stoppedAt IS NULL") == "1")
        #expect(notify.received.first?.contains("READY=1") == true, "something came before READY=1: \(notify.received)")
        var beats: [String] = []
        for _ in 0..<3 {
            let before = try fixture.sql("SELECT heartbeatAt FROM opsh_runners WHERE pid = \(runner.pid)")
            guard notify.waitFor(timeout: 30, { $0.contains("WATCHDOG=1") }) != nil else { break }
            // Each WATCHDOG=1 follows a heartbeat the database took.
            let after = try fixture.sql("SELECT heartbeatAt FROM opsh_runners WHERE pid = \(runner.pid)")
            #expect((Double(after) ?? 0) > (Double(before) ?? 0), "WATCHDOG=1 without a new heartbeat: \(before) → \(after)")
            beats.append(after)
        }
        #expect(beats.count == 3, "\(notify.received)")
        kill(runner.pid, SIGTERM)
        let stopping = notify.waitFor(timeout: 30) { $0.contains("STOPPING=1") }
        let result = runner.finish()
        #expect(stopping?.contains("STATUS=SIGTERM: claiming no more builds") == true, "\(notify.received)")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try fixture.sql("SELECT count(*) FROM opsh_runners WHERE pid = \(runner.pid) AND stoppedAt IS NOT NULL") == "1")
    }

    /// SQLite: a write lock held by another process past the busy timeout
    /// is a database that cannot take the heartbeat, made at will. (On
    /// PostgreSQL a heartbeat waits for a row lock without a time limit:
    /// no WATCHDOG=1 either, but nothing to wait for in a test.)
    @Test func noWatchdogWhileTheDatabaseCannotTakeTheHeartbeat() throws {
        let fixture = try RunnerSandbox(.sqlite)
        let notify = try NotifySocket(in: fixture.root, abstract: true)
        let runner = try fixture.sandbox.start(opshExecutable, ["runner", "--db", fixture.database.db, "--heartbeat", "0.2", "--busy-timeout", "0.1"],
                                               environment: fixture.sandbox.environment.merging(["NOTIFY_SOCKET": notify.address]) { $1 })
        // Control: with nothing in the way, its heartbeats feed the watchdog.
        #expect(notify.waitFor(timeout: 30) { $0.contains("WATCHDOG=1") } != nil, "\(notify.received)")

        let held = fixture.root + "/held"
        let holder = try fixture.sandbox.start("/usr/bin/sqlite3", [fixture.database.db], stdin: """
            BEGIN IMMEDIATE;
            .output \(held)
            .print held
            .output stdout

            """, keepingStdinOpen: true)
        #expect(waitForFile(held, timeout: 30) == "held", "sqlite3 never took the lock")
        // A heartbeat that failed says so in STATUS=; from then on, no WATCHDOG=1 while the lock is held.
        let failed = notify.waitFor(timeout: 30) { $0.contains("STATUS=cannot record its heartbeat") }
        #expect(failed != nil, "\(notify.received)")
        let since = notify.received.count
        var failures = 0
        while failures < 3, let message = notify.next(timeout: 30) {
            if message.contains("STATUS=cannot record its heartbeat") { failures += 1 }
        }
        #expect(failures == 3, "\(notify.received)")
        let whileLocked = notify.received[since...]
        #expect(!whileLocked.contains { $0.contains("WATCHDOG=1") }, "WATCHDOG=1 while the database could not take a heartbeat: \(whileLocked)")

        holder.write("COMMIT;\n")
        holder.closeInput()
        _ = holder.finish()
        #expect(notify.waitFor(timeout: 30) { $0.contains("WATCHDOG=1") } != nil, "no WATCHDOG=1 once the lock was gone: \(notify.received)")
        kill(runner.pid, SIGTERM)
        let result = runner.finish()
        #expect(result.status == 0, "\(result.stderr)")
        // Said on its log, with the time and as a problem.
        let problem = result.stderr.split(separator: "\n").first { $0.contains("cannot record this runner's heartbeat") }.map(String.init) ?? ""
        #expect(problem.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ opsh runner: problem: cannot record this runner's heartbeat \(tried again in 0.2 s\): "#,
                               options: .regularExpression) != nil, "\(result.stderr)")
    }

    /// Every line on a runner's stderr starts with its UTC time and `opsh
    /// runner:`, and what went wrong says `problem:` (a build's log or
    /// heartbeat that could not be written while SQLite's write lock was
    /// held elsewhere: said by the log sink and the job manager, which
    /// wrote them as bare notices before).
    @Test func everyLineARunnerPrintsHasItsTimeAndEveryProblemItsPrefix() throws {
        let fixture = try RunnerSandbox(.sqlite)
        let go = fixture.root + "/go"
        let scheme = try fixture.scheme("Talk", "while [ ! -e '\(go)' ]; do echo tick; sleep 0.05; done")
        let build = try fixture.enqueue(scheme)[0]
        let runner = try fixture.startRunner(["--heartbeat", "0.2", "--busy-timeout", "0.1"])
        #expect(try waitUntil(30) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'tick'") != "0" })
        let held = fixture.root + "/held"
        let holder = try fixture.sandbox.start("/usr/bin/sqlite3", [fixture.database.db], stdin: """
            BEGIN IMMEDIATE;
            .output \(held)
            .print held
            .output stdout

            """, keepingStdinOpen: true)
        #expect(waitForFile(held, timeout: 30) == "held", "sqlite3 never took the lock")
        // Read as they come, until the log's and the builds' heartbeat's problems were said.
        var said: [String] = []
        while !(said.contains { $0.contains("cannot write the log of build") } && said.contains { $0.contains("cannot record the heartbeat of 1 build(s)") }) {
            let line = String(decoding: readFirstLine(runner.standardError), as: UTF8.self)
            if line.isEmpty { break }
            said.append(line)
        }
        holder.write("COMMIT;\n")
        holder.closeInput()
        _ = holder.finish()
        FileManager.default.createFile(atPath: go, contents: nil)
        #expect(try waitUntil(30) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" })
        kill(runner.pid, SIGTERM)
        let result = runner.finish()
        #expect(result.status == 0, "\(result.stderr)")
        let lines = said.map { $0.trimmingCharacters(in: .newlines) } + result.stderr.split(separator: "\n").map(String.init)
        for line in lines {
            #expect(line.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ opsh runner: "#, options: .regularExpression) != nil, "\(line)")
        }
        for problem in ["cannot write the log of build \(build); its lines are kept", "cannot record the heartbeat of 1 build(s)"] {
            let line = lines.first { $0.contains(problem) } ?? ""
            #expect(line.contains("opsh runner: problem: \(problem)"), "\(problem): \(lines.joined(separator: "\n"))")
        }
    }
}
