import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `opsh runner` through faults (README, "Build runners": every build runs
/// exactly once): a database that does not answer for a while, and a
/// runner paused past its lease. One body per engine: on PostgreSQL the
/// outage is the server stopped (fast shutdown, sessions cut) and started
/// again; on SQLite it is the write lock held by another process.
@Suite struct RunnerFaultTests {
    /// Three runners, three builds that end while the database does not
    /// answer for five seconds (ten heartbeats): no build is taken back or
    /// run twice, no log line is lost, and each end is recorded once the
    /// database answers again.
    @Test(arguments: Engine.allCases)
    func aDatabaseThatDoesNotAnswerForFiveSecondsLosesNoLineAndRunsNoBuildTwice(_ engine: Engine) throws {
        let server = engine == .postgresql ? try PostgresServer.start(in: "/tmp/opsh-pgo-\(getpid())-\(UInt16.random(in: 0...UInt16.max))", listen: []) : nil
        defer { server?.stop() }
        let fixture = try RunnerSandbox(engine, on: server)
        // Each build ends once the outage began (the test makes `outage`).
        let outage = fixture.root + "/outage"
        let scheme = try fixture.scheme("Outage", """
            echo "$OPSH_BUILD_ID" >> '\(fixture.ranFile)'; echo started
            while [ ! -f '\(outage)' ]; do sleep 0.05; done; i=0
            while [ $i -lt 200 ]; do echo "line $i"; i=$((i+1)); done; echo done
            """)
        let ids = try fixture.enqueue(scheme, count: 3)
        let runners = try (0..<3).map { _ in try fixture.startRunner(["--heartbeat", "0.5", "--busy-timeout", "1"]) }
        let allStarted = try waitUntil(60) {
            try fixture.sql("SELECT count(*) FROM buildLogs WHERE content = 'started'") == "3"
        }
        #expect(allStarted, "\((try? fixture.sql("SELECT id, status FROM builds")) ?? "")")

        // The outage: five seconds, in which every build ends.
        let outageStarted = Date()
        var lockHolder: ChildProcess?
        switch engine {
        case .postgresql:
            try server?.halt()
        case .sqlite:
            let held = fixture.root + "/held"
            lockHolder = try fixture.sandbox.start("/usr/bin/sqlite3", [fixture.database.db], stdin: """
                .timeout 10000
                BEGIN IMMEDIATE;
                .output \(held)
                .print held
                .output stdout

                """, keepingStdinOpen: true)
            #expect(waitForFile(held, timeout: 30) == "held", "sqlite3 never took the write lock")
        }
        try Data().write(to: URL(fileURLWithPath: outage))
        Thread.sleep(forTimeInterval: max(0, 5 - Date().timeIntervalSince(outageStarted)))  // the fault's length, not a wait for a result
        switch engine {
        case .postgresql:
            try server?.resume()
        case .sqlite:
            lockHolder?.write("COMMIT;\n")
            lockHolder?.closeInput()
            _ = lockHolder?.finish()
        }

        let allSucceeded = try waitUntil(90) {
            try fixture.sql("SELECT count(*) FROM builds WHERE status = 'succeeded'") == "3"
        }
        for runner in runners { kill(runner.pid, SIGTERM) }
        let results = runners.map { $0.finish() }
        let said = results.map(\.stderr).joined(separator: "\n---\n")
        #expect(allSucceeded, "\((try? fixture.sql("SELECT id, status, attempts FROM builds")) ?? "")\n\(said)")
        // Each ran once: once in the file, one attempt, nothing taken back.
        #expect(fixture.ranIds().sorted() == ids.sorted(), "\(fixture.ranIds())\n\(said)")
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE attempts = 1") == "3", "\(said)")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE category = 'runner'") == "0",
                "\((try? fixture.sql("SELECT content FROM buildLogs WHERE category = 'runner'")) ?? "")")
        // Every line of every build landed once, the end line too.
        #expect(try fixture.sql("""
            SELECT count(*) FROM builds b WHERE
              (SELECT count(*) FROM buildLogs l WHERE l.buildId = b.id AND l.content LIKE 'line %') = 200
              AND (SELECT count(*) FROM buildLogs l WHERE l.buildId = b.id AND l.content = 'done') = 1
              AND (SELECT count(*) FROM buildLogs l WHERE l.buildId = b.id AND l.content LIKE 'build succeeded (exit code 0)%') = 1
            """) == "3", "\(said)")
        // The runners said they waited for the database, and went on.
        #expect(said.contains("without the database"), "\(said)")
        for result in results { #expect(result.status == 0, "\(result.stderr)") }
    }

    /// A runner paused (SIGSTOP) past three heartbeats: another takes its
    /// build back and starts it again; resumed (SIGCONT), the paused one
    /// finds its lease gone at its first write, writes nothing into the
    /// new attempt's log, and says on stderr which runner has the build.
    /// Control: a pause shorter than the lease changes nothing.
    @Test(arguments: Engine.allCases)
    func aRunnerResumedAfterItsBuildWasTakenBackWritesNothingMoreAndSaysWhoHasIt(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let attempts = fixture.root + "/attempts.txt"
        let go = fixture.root + "/go"
        let scheme = try fixture.scheme("Paused", """
            echo "$$" >> '\(attempts)'
            if [ "$(wc -l < '\(attempts)')" -eq 1 ]; then echo "first started"; sleep 3; echo "first done"; exit 0; fi
            echo "second started"; while [ ! -f '\(go)' ]; do sleep 0.05; done; echo "second done"
            """)
        let build = try #require(try fixture.enqueue(scheme).first)
        let paused = try fixture.startRunner(["--heartbeat", "0.5"])
        #expect(try waitUntil(30) {
            try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'first started'") == "1"
        })
        kill(paused.pid, SIGSTOP)
        let taker = try fixture.startRunner(["--heartbeat", "0.5"])
        let startedAgain = try waitUntil(30) {
            try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'second started'") == "1"
        }
        #expect(startedAgain, "\((try? fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(build)'")) ?? "")")
        // The first attempt's command has ended meanwhile ("first done"
        // and its exit wait in the paused runner's pipe).
        let firstPid = try #require((try? String(contentsOfFile: attempts, encoding: .utf8))?.split(separator: "\n").first
            .flatMap { pid_t($0) })
        #expect(waitUntil(20) { kill(firstPid, 0) != 0 })
        kill(paused.pid, SIGCONT)
        let said = readStderr(of: paused, until: "is no longer this run's")
        #expect(said.contains("build \(build) is no longer this run's (attempt 1): runner pid \(taker.pid) on \(hostName()) holds it now (running, attempt 2)"),
                "\(said)")
        #expect(said.contains("requeued by runner pid \(taker.pid)"), "\(said)")

        try Data().write(to: URL(fileURLWithPath: go))
        #expect(try waitUntil(30) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" })
        // Nothing of the paused run's after the take-back: not its output,
        // not its end; the new attempt's end once.
        let log = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(build)' ORDER BY createdAt")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'first done'") == "0", "\(log)")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content LIKE 'build succeeded%'") == "1", "\(log)")
        #expect(try fixture.sql("SELECT runnerPid, attempts FROM builds WHERE id = '\(build)'") == "\(taker.pid)|2")

        // Control: the same pause, shorter than the lease (three heartbeats
        // of 0.5 s): the paused runner's writes land, nothing is taken back.
        kill(taker.pid, SIGTERM)  // only the paused one may claim it
        #expect(taker.finish().status == 0)
        let control = try #require(try fixture.enqueue(try fixture.scheme("Short", "echo 'short started'; sleep 1; echo 'short done'")).first)
        #expect(try waitUntil(30) {
            try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(control)' AND content = 'short started'") == "1"
        })
        kill(paused.pid, SIGSTOP)
        Thread.sleep(forTimeInterval: 0.5)  // the pause's length, not a wait for a result
        kill(paused.pid, SIGCONT)
        #expect(try waitUntil(30) { try fixture.sql("SELECT status FROM builds WHERE id = '\(control)'") == "succeeded" })
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(control)' AND content = 'short done'") == "1")
        #expect(try fixture.sql("SELECT runnerPid, attempts FROM builds WHERE id = '\(control)'") == "\(paused.pid)|1")

        kill(paused.pid, SIGTERM)
        #expect(paused.finish().status == 0)
    }

    /// A build's end line ("build succeeded …") lands with its end, in one
    /// transaction, or not at all: an end the database refuses (here a
    /// trigger) leaves no end line in the log of a build still `running`,
    /// which a take-back would run again. Before, the line went through the
    /// log's sink ahead of the end. The control: the same build once the
    /// trigger is gone ends with its line.
    @Test(arguments: Engine.allCases)
    func anEndLineLandsOnlyWithTheEnd(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        _ = try fixture.sql(engine == .sqlite ? """
            CREATE TRIGGER refuse_end BEFORE UPDATE OF status ON builds WHEN NEW.status = 'succeeded'
            BEGIN SELECT RAISE(ABORT, 'the end is refused'); END;
            """ : """
            CREATE FUNCTION refuse_end() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.status = 'succeeded' THEN RAISE EXCEPTION 'the end is refused'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER refuse_end BEFORE UPDATE ON builds FOR EACH ROW EXECUTE FUNCTION refuse_end();
            """)
        let scheme = try fixture.scheme("Refused", "echo 'built it'")
        let build = try #require(try fixture.enqueue(scheme).first)
        let runner = try fixture.startRunner(["--heartbeat", "0.5"])
        let said = readStderr(of: runner, until: "cannot record the end of build \(build)")
        #expect(said.contains("the end is refused"), "\(said)")
        let log = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(build)' ORDER BY createdAt, id")
        #expect(log.contains("built it"), "\(log)")
        #expect(!log.contains("build succeeded"), "\(log)")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "running")

        _ = try fixture.sql(engine == .sqlite ? "DROP TRIGGER refuse_end" : "DROP TRIGGER refuse_end ON builds")
        let control = try #require(try fixture.enqueue(scheme).first)
        #expect(try waitUntil(30) { try fixture.sql("SELECT status FROM builds WHERE id = '\(control)'") == "succeeded" })
        let controlLog = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(control)' ORDER BY createdAt, id")
        #expect(controlLog.split(separator: "\n").last?.hasPrefix("build succeeded (exit code 0)") == true, "\(controlLog)")
        kill(runner.pid, SIGTERM)
        #expect(runner.finish().status == 0)
    }

    /// A runner paused inside one of its transactions (between two of its
    /// statements, its build's row locked) does not keep the build from
    /// being taken back: the server ends a runner's session idle in a
    /// transaction past three heartbeats (`idle_in_transaction_session_timeout`),
    /// which rolls it back and frees the row. Resumed, the paused runner
    /// writes nothing more. Without the limit the build stayed `running`
    /// under the stopped runner's lock for as long as it was paused, since a
    /// take-back skips a row a holder has locked.
    ///
    /// PostgreSQL only: a take-back waits on a row lock only there. On SQLite
    /// a process paused inside a write transaction holds the file's write
    /// lock, and no server can end it: every writer waits until it goes on
    /// or is killed (README, "Beside a live backend").
    @Test func aRunnerPausedInsideItsTransactionLosesTheBuildOnceTheServerEndsItsSession() throws {
        let fixture = try RunnerSandbox(.postgresql)
        let attempts = fixture.root + "/attempts.txt"
        let go = fixture.root + "/go"
        let scheme = try fixture.scheme("PausedInside", """
            echo "$$" >> '\(attempts)'
            if [ "$(wc -l < '\(attempts)')" -eq 1 ]; then echo "first started"; exit 0; fi
            echo "second started"; while [ ! -f '\(go)' ]; do sleep 0.05; done; echo "second done"
            """)
        // The first attempt's end waits in the server for a while: the
        // runner is stopped there, its transaction open and the row locked.
        _ = try fixture.sql("""
            CREATE FUNCTION slow_first_end() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NEW.status = 'succeeded' AND OLD.status = 'running' AND NEW.attempts = 1 THEN PERFORM pg_sleep(5); END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER slow_first_end BEFORE UPDATE ON builds FOR EACH ROW EXECUTE FUNCTION slow_first_end();
            """)
        let build = try #require(try fixture.enqueue(scheme).first)
        let paused = try fixture.startRunner(["--heartbeat", "0.5"])
        let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'"
        #expect(try waitUntil(30) { try fixture.sql(sleeping) == "1" })
        kill(paused.pid, SIGSTOP)
        // The end's UPDATE returns to a stopped runner: its session waits,
        // idle in its transaction, holding the build's row.
        let idleInTransaction = """
            SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'
            """
        #expect(try waitUntil(30) { try fixture.sql(idleInTransaction) == "1" })

        let taker = try fixture.startRunner(["--heartbeat", "0.5"])
        let startedAgain = try waitUntil(30) {
            try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'second started'") == "1"
        }
        #expect(startedAgain, "\((try? fixture.sql("SELECT status, runnerPid, attempts FROM builds WHERE id = '\(build)'")) ?? "")")

        kill(paused.pid, SIGCONT)
        try Data().write(to: URL(fileURLWithPath: go))
        #expect(try waitUntil(30) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" })
        // The paused runner's end was rolled back with its session, its end
        // line with it (the line is written in the end's transaction). Its
        // output had landed before it stopped; after the take-back's note,
        // only the second attempt's lines and its end: one end in the log.
        let log = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(build)' ORDER BY createdAt, id")
            .split(separator: "\n").map(String.init)
        let takenBack = try #require(log.firstIndex { $0.hasPrefix("taken back from runner pid \(paused.pid)") }, "\(log)")
        let after = log[(takenBack + 1)...]
        #expect(!after.contains("first started"), "\(log)")
        #expect(log.filter { $0.hasPrefix("build succeeded") }.count == 1, "\(log)")
        #expect(after.last?.hasPrefix("build succeeded") == true, "\(log)")
        #expect(try fixture.sql("SELECT runnerPid, attempts FROM builds WHERE id = '\(build)'") == "\(taker.pid)|2")

        kill(taker.pid, SIGTERM)
        kill(paused.pid, SIGTERM)
        #expect(taker.finish().status == 0)
        // Resumed, it found its session ended and its lease gone.
        let pausedEnd = paused.finish()
        #expect(pausedEnd.stderr.contains("build \(build) is no longer this run's (attempt 1)"), "\(pausedEnd.stderr)")
        #expect(pausedEnd.stderr.contains("requeued by runner pid \(taker.pid)"), "\(pausedEnd.stderr)")
    }

    /// Failover (PostgreSQL only: an SQLite file has no standby): a primary
    /// and a streaming standby (`pg_basebackup -R`, synchronous, so that no
    /// commit is lost with the primary), three runners and a script on a
    /// two-host URL with `target_session_attrs=read-write`. The primary
    /// stops mid-burst and the standby is promoted: every build runs
    /// exactly once, their ends land on the new primary, and the script's
    /// next statement works there.
    @Test func runnersAndAScriptOnATwoHostURLGoOnOnThePromotedStandby() throws {
        let tag = "\(getpid())-\(UInt16.random(in: 0...UInt16.max))"
        let primary = try PostgresServer.start(in: "/tmp/opsh-pgp-\(tag)", listen: [])
        defer { primary.stop() }
        let fixture = try RunnerSandbox(.postgresql, on: primary)
        let failedOver = fixture.root + "/failed-over"
        let scheme = try fixture.scheme("Failover", """
            echo "$OPSH_BUILD_ID" >> '\(fixture.ranFile)'; echo started
            while [ ! -f '\(failedOver)' ]; do sleep 0.05; done; echo done
            """)
        let standby = try primary.standby(in: "/tmp/opsh-pgs-\(tag)")
        defer { standby.stop() }
        // Synchronous: a commit the primary acknowledged is on the standby.
        _ = try primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        _ = try primary.sql("ALTER SYSTEM SET synchronous_commit = 'on'")
        _ = try primary.sql("SELECT pg_reload_conf()")
        #expect(try waitUntil(30) { try primary.sql("SELECT sync_state FROM pg_stat_replication") == "sync" })

        let name = PostgresServer.databaseName(of: fixture.database.db)
        let twoHosts = "postgresql://\(primary.role)@/\(name)?host=\(primary.directory),\(standby.directory)&target_session_attrs=read-write"
        let ids = try fixture.enqueue(scheme, count: 6)
        let runners = try (0..<3).map { _ in
            try fixture.sandbox.start(opshExecutable, ["runner", "--db", twoHosts, "--heartbeat", "0.5", "--concurrency", "1"])
        }
        let ready = fixture.root + "/ready"
        let go = fixture.root + "/go"
        let script = try fixture.sandbox.start(opshExecutable, ["--db", twoHosts, "-e", """
            print(db.value("SELECT pg_is_in_recovery()"))
            io.open("\(ready)", "w"):close()
            while not io.open("\(go)") do opsh.wait(0.05) end
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('after failover', 1)")
            print(db.value("SELECT pg_is_in_recovery()"))
            """])
        #expect(try waitUntil(60) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE content = 'started'") == "3" })
        #expect(waitUntil(30) { FileManager.default.fileExists(atPath: ready) })

        // The primary stops mid-burst; the standby takes over.
        try primary.halt()
        try standby.promote()
        try Data().write(to: URL(fileURLWithPath: failedOver))
        try Data().write(to: URL(fileURLWithPath: go))

        let onStandby = { (sql: String) throws -> String in try standby.sql(sql, url: standby.url(of: name)) }
        let allDone = try waitUntil(120) { try onStandby("SELECT count(*) FROM builds WHERE status = 'succeeded'") == "6" }
        let scriptResult = fixture.sandbox.finish(script)
        for runner in runners { kill(runner.pid, SIGTERM) }
        let results = runners.map { fixture.sandbox.finish($0) }
        let said = results.map(\.stderr).joined(separator: "\n---\n")
        #expect(allDone, "\((try? onStandby("SELECT id, status, attempts FROM builds")) ?? "")\n\(said)")
        #expect(fixture.ranIds().sorted() == ids.sorted(), "\(fixture.ranIds())\n\(said)")
        #expect(try onStandby("SELECT count(*) FROM builds WHERE attempts = 1") == "6", "\(said)")
        #expect(try onStandby("SELECT count(*) FROM buildLogs WHERE category = 'runner'") == "0", "\(said)")
        #expect(try onStandby("""
            SELECT count(*) FROM builds b WHERE
              (SELECT count(*) FROM buildLogs l WHERE l.buildId = b.id AND l.content = 'done') = 1
              AND (SELECT count(*) FROM buildLogs l WHERE l.buildId = b.id AND l.content LIKE 'build succeeded (exit code 0)%') = 1
            """) == "6", "\(said)")
        #expect(scriptResult.status == 0, "\(scriptResult.stderr)")
        // Both statements ran on a primary (booleans reach Lua as 1 and 0).
        #expect(scriptResult.stdout == "0\n0\n", "\(scriptResult.stdout)")
        #expect(scriptResult.stderr.contains("connected again"), "\(scriptResult.stderr)")
        #expect(try onStandby("SELECT count(*) FROM telemetry WHERE event = 'after failover'") == "1")
        for result in results { #expect(result.status == 0, "\(result.stderr)") }
    }
}
