import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `opsh runner` (README, "Build runners") on either engine, one body per
/// promise: the same runner over SQLiteBuildStore and PostgresBuildQueue,
/// every assertion read from the database by another process.
@Suite struct RunnerTests {
    @Test(arguments: Engine.allCases) func threeRunnersOnOneDatabaseRunThirtyQueuedBuildsEachExactlyOnce(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let scheme = try fixture.scheme("Append", """
            echo "$OPSH_BUILD_ID" >> '\(fixture.ranFile)'; echo "ran $OPSH_BUILD_ID"; sleep 0.1
            """)
        let ids = try fixture.enqueue(scheme, count: 30)
        #expect(ids.count == 30)
        let runners = try (0..<3).map { _ in try fixture.startRunner(["--concurrency", "2", "--heartbeat", "0.5"]) }
        let results = try fixture.stopOnceSucceeded(30, runners)
        for result in results {
            #expect(result.stderr.contains("SIGTERM: claiming no more builds"), "\(result.stderr)")
        }
        // Each build ran once: its id once in the file, one attempt, its
        // output line and its end once in its log, one claim in all the runners' logs.
        let ran = fixture.ranIds()
        #expect(ran.count == 30, "\(ran.count) runs")
        #expect(Set(ran) == Set(ids))
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE status = 'succeeded' AND attempts = 1") == "30")
        #expect(try fixture.sql("""
            SELECT count(*) FROM builds b WHERE
              (SELECT count(*) FROM buildLogs l WHERE l.buildId = b.id AND l.content = 'ran ' || b.id) = 1
              AND (SELECT count(*) FROM buildLogs l WHERE l.buildId = b.id AND l.content LIKE 'build succeeded (exit code 0)%') = 1
            """) == "30")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE category = 'runner'") == "0")
        let claims = results.map { $0.stderr.components(separatedBy: "claimed build ").count - 1 }
        #expect(claims.reduce(0, +) == 30, "claims per runner: \(claims)")
        // Each recorded its runner: this host, one of the three pids; more
        // than one did work (the database says so, not only their logs).
        // On PostgreSQL all three did: claims skip what others hold (SKIP
        // LOCKED); on SQLite they take turns at the file's one write lock,
        // which a busy machine may give one of them seldom.
        let pids = Set(runners.map { String($0.pid) })
        let recorded = try fixture.sql("SELECT runnerPid FROM builds GROUP BY runnerPid").split(separator: "\n").map(String.init)
        #expect(Set(recorded).isSubset(of: pids), "\(recorded) not among \(pids)")
        #expect(recorded.count > 1, "only \(recorded) did work")
        if engine == .postgresql {
            #expect(Set(recorded) == pids, "\(recorded) against \(pids); claims per runner: \(claims)")
        }
        #expect(try fixture.sql("SELECT DISTINCT runnerHost FROM builds") == hostName())
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE runnerStartedAt IS NULL OR heartbeatAt IS NULL OR commitHash IS NULL") == "0")
        // Every start and end within the test's run (on PostgreSQL by the server's clock), ends after starts.
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE NOT (startDate <= endDate AND endDate <= \(RunnerSandbox.now(engine)))") == "0")
    }

    @Test(arguments: Engine.allCases) func aBuildOfARunnerKilledMidBuildIsRequeuedByAnotherWithinAFewHeartbeatsAndRunAgain(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let (build, killed, taker, tookBackIn) = try fixture.killARunnerMidBuild(maxAttempts: 3)
        #expect(tookBackIn < 4, "taken back \(tookBackIn) s after the kill (heartbeat 0.4 s, stale after 3)")
        let succeeded = try waitUntil(20) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" }
        kill(taker.pid, SIGTERM)
        let takerResult = taker.finish()
        _ = killed.finish()
        let status = try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'")
        #expect(succeeded, "\(status) \(takerResult.stderr)")
        #expect(takerResult.status == 0)

        // The log line says who was lost, when it last beat, and what was done.
        let note = try fixture.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'")
        #expect(note.hasPrefix("warning: taken back from runner pid \(killed.pid) on \(hostName()) (started "), "\(note)")
        #expect(note.contains("no heartbeat since") && note.contains("it beats every 0.4 s, stale after 3"), "\(note)")
        #expect(note.contains("requeued by runner pid \(taker.pid) on \(hostName()) (attempt 1 of 3 was lost: the build did not fail, its runner stopped)"), "\(note)")
        #expect(takerResult.stderr.contains("build \(build) requeued: taken back from runner pid \(killed.pid)"), "\(takerResult.stderr)")
        #expect(!takerResult.stderr.contains("claimed build") && !takerResult.stderr.contains("started: pid")
                && !takerResult.stderr.contains("succeeded"), "--quiet said more: \(takerResult.stderr)")
        // Run again by the taker, as its second attempt.
        #expect(try fixture.sql("SELECT runnerPid, attempts FROM builds WHERE id = '\(build)'") == "\(taker.pid)|2")
        let log = try fixture.sql("SELECT level || ' ' || content FROM buildLogs WHERE buildId = '\(build)' ORDER BY createdAt")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'second attempt'") == "1", "\(log)\n\(takerResult.stderr)")
        // The second attempt checked out into a folder of its own: the
        // killed runner's processes may still write in the first.
        let folders = try String(contentsOfFile: fixture.root + "/attempts.txt", encoding: .utf8)
            .split(separator: "\n").map { $0.split(separator: " ", maxSplits: 1).last.map(String.init) ?? "" }
        #expect(folders.count == 2 && folders[0].hasSuffix("/\(build)") && folders[1] == folders[0] + ".attempt-2", "\(folders)")
        // On PostgreSQL, in opsh's data folder of the machine (there is no
        // database file to put them beside).
        if engine == .postgresql {
            #expect(folders.first?.hasPrefix(fixture.root + "/data/opsh/workspaces/") == true, "\(folders)")
        }
    }

    @Test(arguments: Engine.allCases) func aBuildThatUsedItsAttemptsIsMarkedFailedSayingWhy(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let (build, killed, taker, _) = try fixture.killARunnerMidBuild(maxAttempts: 1)
        kill(taker.pid, SIGTERM)
        let takerResult = taker.finish()
        _ = killed.finish()
        #expect(try fixture.sql("SELECT status, \(RunnerSandbox.isNotNull("endDate")) FROM builds WHERE id = '\(build)'") == "failed|1")
        let note = try fixture.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'")
        #expect(note.hasPrefix("error: taken back from runner pid \(killed.pid) on \(hostName())"), "\(note)")
        #expect(note.contains("marked failed by runner pid \(taker.pid) on \(hostName()): it was started 1 time(s) and its runner stopped each time (at most 1 attempts)"), "\(note)")
        #expect(takerResult.stderr.contains("build \(build) marked failed: taken back"), "\(takerResult.stderr)")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'second attempt'") == "0")
    }

    @Test(arguments: Engine.allCases) func sigtermLetsTheRunningBuildFinishClaimsNothingMoreAndExits0(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let go = fixture.root + "/go"
        let scheme = try fixture.scheme("Gated", "echo started; while [ ! -f '\(go)' ]; do sleep 0.02; done; echo done")
        let build = try #require(try fixture.enqueue(scheme).first)
        let runner = try fixture.startRunner(["--concurrency", "1", "--heartbeat", "0.3"])
        #expect(try waitUntil(20) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'started'") == "1" })
        kill(runner.pid, SIGTERM)
        // Queued once the runner has said it claims no more.
        let said = readStderr(of: runner, until: "SIGTERM: claiming no more builds; waiting for 1 running build(s) to finish")
        let later = try #require(try fixture.enqueue(scheme).first)
        // SIGTERM does not end a runner with a build running: still there a
        // while later (the waiting is what is tested: nothing may happen in it).
        usleep(800_000)
        #expect(kill(runner.pid, 0) == 0, "the runner exited with its build running")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "running")
        FileManager.default.createFile(atPath: go, contents: nil)
        let result = runner.finish()
        let stderr = said + result.stderr
        #expect(result.status == 0, "\(stderr)")
        #expect(stderr.contains("SIGTERM: claiming no more builds; waiting for 1 running build(s) to finish"), "\(stderr)")
        #expect(stderr.contains("claimed build \(build) (com.example.app Gated #1, version 1.0.0)"), "\(stderr)")
        #expect(stderr.contains("build \(build) (com.example.app Gated #1) succeeded (exit code 0)"), "\(stderr)")
        #expect(stderr.contains("stopped (exit status 0)"), "\(stderr)")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'done'") == "1")
        // Queued after the SIGTERM: left for other runners, held by nobody.
        #expect(try fixture.sql("SELECT status, \(RunnerSandbox.isNull("runnerId")) FROM builds WHERE id = '\(later)'") == "queued|1")
    }

    @Test(arguments: Engine.allCases) func aSecondSigtermCancelsTheRunningBuildsWithALogLineAndExits143(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let scheme = try fixture.scheme("Endless", "echo started; while true; do sleep 0.02; done")
        let build = try #require(try fixture.enqueue(scheme).first)
        let runner = try fixture.startRunner(["--heartbeat", "0.3"])
        #expect(try waitUntil(20) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'started'") == "1" })
        kill(runner.pid, SIGTERM)
        // The second once the first was taken (two pending SIGTERMs are one).
        let said = readStderr(of: runner, until: "SIGTERM: claiming no more builds")
        kill(runner.pid, SIGTERM)
        let result = runner.finish()
        #expect(result.status == 143, "\(said)\(result.stderr)")
        #expect(result.stderr.contains("SIGTERM: cancelling 1 running build(s)"), "\(said)\(result.stderr)")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "cancelled")
        let line = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(build)' AND content LIKE 'build cancelled%'")
        #expect(line.hasPrefix("build cancelled (SIGTERM)"), "\(line)")
        #expect(line.hasSuffix(": opsh runner pid \(runner.pid) on \(hostName()) was stopped (SIGTERM)"), "\(line)")
    }

    @Test(arguments: Engine.allCases) func jobsCancelInAShellStopsABuildARunnerRunsAtItsNextHeartbeat(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let pidFile = fixture.root + "/build.pid"
        let scheme = try fixture.scheme("Endless", "echo $$ > '\(pidFile)'; echo started; while true; do sleep 0.02; done")
        let build = try #require(try fixture.enqueue(scheme).first)
        let runner = try fixture.startRunner(["--heartbeat", "0.3"])
        #expect(try waitUntil(20) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'started'") == "1" })
        let buildPid = try #require(pid_t(waitForFile(pidFile) ?? ""))
        #expect(try fixture.lua("return jobs.cancel(...)", [build]) == ["true"])
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "cancelled")
        // The runner stops the build's processes at its next heartbeat.
        let stopped = waitUntil(5) { kill(buildPid, 0) != 0 }
        #expect(stopped, "the build's process still runs")
        #expect(try waitUntil(5) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content LIKE 'build cancelled (SIGTERM)%from another opsh'") == "1" })
        kill(runner.pid, SIGTERM)
        let result = runner.finish()
        #expect(result.status == 0)
        #expect(result.stderr.contains("build \(build) was cancelled from another opsh: stopping its run here"), "\(result.stderr)")
        let note = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'")
        #expect(note.hasPrefix("cancelled by pid ") && note.contains("its runner (pid \(runner.pid) on \(hostName())) stops the build at its next heartbeat (every 0.3 s)"), "\(note)")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "cancelled")
    }

    @Test(arguments: Engine.allCases) func jobsStartInAShellAndARunnerNeverBothRunOneBuild(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let scheme = try fixture.scheme("Append", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'; sleep 0.2")
        let runner = try fixture.startRunner(["--concurrency", "1", "--heartbeat", "0.3"])
        // Ten builds queued for anyone, which the script then starts one by
        // one while the runner claims what it can; and ten started in the
        // script from a scheme and version (held from their creation).
        let script = try fixture.sandbox.script("race.lua", """
            local scheme = ...
            local pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
            local queued, mine, refused, started = {}, {}, {}, {}
            for i = 1, 10 do queued[i] = jobs.create{ scheme = scheme, version = "1.0.0" }.id end
            os.execute("sleep 0.3")
            for i = 1, 10 do
              mine[#mine + 1] = jobs.start{ scheme = scheme, version = "1.0.0" }.id
              local ok, problem = pcall(jobs.start, queued[i])
              if ok then started[#started + 1] = queued[i] else refused[#refused + 1] = queued[i] .. " " .. tostring(problem) end
              os.execute("sleep 0.05")
            end
            for _, id in ipairs(mine) do jobs.wait(id, 30) end
            for _, id in ipairs(started) do jobs.wait(id, 30) end
            print("pid " .. pid)
            for _, id in ipairs(mine) do print("mine " .. id) end
            for _, id in ipairs(started) do print("started " .. id) end
            for _, line in ipairs(refused) do print("refused " .. line) end
            """)
        let race = try fixture.sandbox.opsh(["run", script, scheme], on: fixture.database)
        #expect(race.status == 0, "\(race.stderr)")
        let allEnded = try waitUntil(30) { try fixture.sql("SELECT count(*) FROM builds WHERE status = 'succeeded'") == "20" }
        kill(runner.pid, SIGTERM)
        let runnerResult = runner.finish()
        let statuses = try fixture.sql("SELECT status, count(*) FROM builds GROUP BY status")
        #expect(allEnded, "statuses: \(statuses)")
        #expect(runnerResult.status == 0)

        let lines = race.stdout.split(separator: "\n").map(String.init)
        let scriptPid = try #require(lines.first { $0.hasPrefix("pid ") }).dropFirst(4)
        let mine = lines.filter { $0.hasPrefix("mine ") }.map { String($0.dropFirst(5)) }
        let started = lines.filter { $0.hasPrefix("started ") }.map { String($0.dropFirst(8)) }
        let refused = lines.filter { $0.hasPrefix("refused ") }
        #expect(mine.count == 10 && started.count + refused.count == 10, "\(race.stdout)")
        // The race went both ways: the script started some, the runner claimed others first.
        #expect(!started.isEmpty && !refused.isEmpty, "started \(started.count), refused \(refused.count)")
        // Every build ran exactly once.
        let ran = fixture.ranIds()
        #expect(ran.count == 20 && Set(ran).count == 20, "\(ran)")
        // What the script started, the script ran; what it could not, the runner did.
        for id in mine + started {
            #expect(try fixture.sql("SELECT runnerPid FROM builds WHERE id = '\(id)'") == String(scriptPid))
        }
        for line in refused {
            let id = String(line.dropFirst(8).prefix(36))
            #expect(try fixture.sql("SELECT runnerPid FROM builds WHERE id = '\(id)'") == "\(runner.pid)")
            let reason = line.contains("was claimed first by pid \(runner.pid) on \(hostName())")
                || line.contains("is running, not queued") || line.contains("is succeeded, not queued")
            #expect(reason, "\(line)")
        }
    }

    @Test(arguments: Engine.allCases) func aRunnerWithSchemesRunsOnlyTheirBuildsByNameOrId(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let release = try fixture.scheme("Release", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'")
        let nightly = try fixture.scheme("Nightly", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'")
        let other = try fixture.scheme("Other", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'")
        let wanted = try fixture.enqueue(release, count: 2) + fixture.enqueue(nightly, count: 2)
        let left = try fixture.enqueue(other, count: 2)
        let runner = try fixture.startRunner(["--scheme", "Release", "--scheme", nightly, "--heartbeat", "0.3"])
        let done = try waitUntil(20) { try fixture.sql("SELECT count(*) FROM builds WHERE status = 'succeeded'") == "4" }
        kill(runner.pid, SIGTERM)
        let result = runner.finish()
        #expect(done && result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("schemes: Release, \(nightly)"), "\(result.stderr)")
        #expect(Set(fixture.ranIds()) == Set(wanted))
        for id in left {
            #expect(try fixture.sql("SELECT status, \(RunnerSandbox.isNull("runnerId")) FROM builds WHERE id = '\(id)'") == "queued|1")
        }
    }

    /// Bad options are usage errors (2) saying what was wrong; a database
    /// that is not opsh's is refused (3), as is one that lacks migration
    /// 004 (the heartbeat columns), where jobs.start still runs builds.
    @Test(arguments: Engine.allCases) func usageErrorsAndADatabaseWithoutTheSchemaOrTheMigrationAreRefusedSayingWhy(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        for (arguments, message) in [
            (["--concurrency", "0"], "opsh: error: '0' is not a positive whole number for '--concurrency'"),
            (["--heartbeat", "soon"], "opsh: error: 'soon' is not a number of seconds (0.05 or more) for '--heartbeat'"),
            (["--scheme", "Nope"], "opsh: error: --scheme 'Nope': no scheme has that id or name"),
            (["extra"], "opsh: error: unexpected argument 'extra'"),
        ] {
            let result = fixture.sandbox.finish(try fixture.startRunner(arguments))
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
            #expect(result.stderr.hasPrefix(message), "\(arguments): \(result.stderr)")
        }
        let empty = try TestDatabase.empty(engine, in: fixture.root + "/empty")
        let refused = fixture.sandbox.finish(try fixture.sandbox.start(opshExecutable, ["runner", "--db", empty.db]))
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(refused.stderr.contains(engine == .sqlite ? "no database at" : "has no opsh schema"), "\(refused.stderr)")

        let migrations = engine == .sqlite ? "grdb_migrations" : "opsh_migrations"
        _ = try fixture.sql("""
            DELETE FROM \(migrations) WHERE identifier = '004_runners';
            DROP INDEX builds_on_status_created; DROP INDEX builds_on_runner;
            ALTER TABLE builds DROP COLUMN runnerId; ALTER TABLE builds DROP COLUMN heartbeatAt;
            ALTER TABLE builds DROP COLUMN heartbeatInterval; ALTER TABLE builds DROP COLUMN attempts;
            """)
        let old = fixture.sandbox.finish(try fixture.startRunner([]))
        #expect(old.status == 3)
        #expect(old.stderr.contains("this database lacks migration 004_runners, which opsh runner needs (a heartbeat per build): run `opsh migrate` first"), "\(old.stderr)")
        // On SQLite jobs.start still runs builds there, as before 004.
        // (PostgreSQL's build queue records a lease on every start, so
        // there jobs.start needs 004 too.)
        guard engine == .sqlite else { return }
        let scheme = try fixture.scheme("Append", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'")
        let ran = try fixture.lua("return jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 30).status", [scheme])
        #expect(ran == ["succeeded"])
    }

    /// PostgreSQL only (runners on other hosts share a server, not a file):
    /// the fleet of README's "A fleet on PostgreSQL" on one machine: three
    /// runners, each on a host of its own (its own network namespace,
    /// address and host name: RunnerHosts), over TCP to one server. They
    /// share the queue as on one host, the database records which host ran
    /// what, the server sees three clients, and a runner on one host takes
    /// back the build of a runner SIGKILLed on another, naming that host.
    @Test(.enabled(if: RunnerHosts.enabled, RunnerHosts.skipReason))
    func runnersOnThreeHostsRunEachBuildOnceAndOneTakesBackWhatAnotherHostsKilledRunnerLeft() throws {
        let hosts = try RunnerHosts(names: ["ci-1", "ci-2", "ci-3"])
        defer { hosts.remove() }
        #expect(!hosts.hosts.map(\.name).contains(hostName()), "this machine is named \(hostName()) too")
        let fixture = try RunnerSandbox(.postgresql, on: hosts.server)
        let scheme = try fixture.scheme("Append", """
            echo "$OPSH_BUILD_ID" >> '\(fixture.ranFile)'; echo "ran $OPSH_BUILD_ID on $(uname -n)"; sleep 0.1
            """)
        // The fleet comes up: the server sees each runner connect from its
        // host's address (this psql, over the Unix socket, left out).
        let runners = try hosts.hosts.map { try fixture.startRunner(["--concurrency", "2", "--heartbeat", "0.5"], on: $0, of: hosts) }
        let clients = """
            SELECT DISTINCT coalesce(host(client_addr), 'the Unix socket') FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY 1
            """
        let addresses = hosts.hosts.map(\.address).sorted().joined(separator: "\n")
        let connected = try waitUntil(20) { try fixture.sql(clients) == addresses }
        let clientsAtStart = try fixture.sql(clients)
        #expect(connected, "clients: \(clientsAtStart)")
        // Then the work: 30 builds.
        let ids = try fixture.enqueue(scheme, count: 30)
        var clientsAtEnd = ""
        _ = try fixture.stopOnceSucceeded(30, runners) {
            // Their connections, while they are still up: from those three addresses only.
            clientsAtEnd = try fixture.sql(clients)
        }
        #expect(clientsAtEnd == addresses)

        // Each build ran once, and recorded the host and pid of the runner
        // that ran it; every host ran some.
        let ran = fixture.ranIds()
        #expect(ran.count == 30 && Set(ran) == Set(ids), "\(ran.count) runs")
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE status = 'succeeded' AND attempts = 1") == "30")
        let expected = zip(hosts.hosts, runners).map { "\($0.name)|\($1.pid)" }
        #expect(try fixture.sql("SELECT runnerHost, runnerPid FROM builds GROUP BY 1, 2 ORDER BY 1") == expected.joined(separator: "\n"))
        // The build's own commands ran on its runner's host too.
        #expect(try fixture.sql("SELECT count(*) FROM builds b JOIN buildLogs l ON l.buildId = b.id WHERE l.content = 'ran ' || b.id || ' on ' || b.runnerHost") == "30")

        // A runner on ci-1 is SIGKILLed mid-build; the one on ci-2 takes the build back and runs it.
        let (build, killed, taker, tookBackIn) = try fixture.killARunnerMidBuild(maxAttempts: 3, hosts: hosts)
        #expect(tookBackIn < 4, "taken back \(tookBackIn) s after the kill (heartbeat 0.4 s, stale after 3)")
        let succeeded = try waitUntil(20) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" }
        kill(taker.pid, SIGTERM)
        let takerResult = taker.finish()
        _ = killed.finish()
        #expect(succeeded, "\(takerResult.stderr)")
        // What the operator reads: the dead runner's host, and (from another
        // host) no word on its process, which only ci-1 could see.
        let note = try fixture.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'")
        #expect(note.hasPrefix("warning: taken back from runner pid \(killed.pid) on ci-1 (started "), "\(note)")
        #expect(note.contains("no heartbeat since") && !note.contains("its process"), "\(note)")
        #expect(note.contains("requeued by runner pid \(taker.pid) on ci-2 (attempt 1 of 3 was lost"), "\(note)")
        #expect(takerResult.stderr.contains("build \(build) requeued: taken back from runner pid \(killed.pid) on ci-1 ("),
                "\(takerResult.stderr)")
        #expect(try fixture.sql("SELECT runnerHost, runnerPid, attempts FROM builds WHERE id = '\(build)'") == "ci-2|\(taker.pid)|2")
    }

    /// PostgreSQL only (an SQLite file has no clock but its runners'):
    /// a runner's heartbeat is judged by the server's clock: a build whose
    /// recorded heartbeat is recent by the server is never taken back,
    /// whatever the runner's machine thinks; one old by the server is.
    /// Three heartbeats count from the server's start at the earliest (a
    /// restart is not a missed heartbeat): the test waits until the test
    /// server has run for longer than that.
    @Test func stalenessIsJudgedByTheServersClock() throws {
        let fixture = try RunnerSandbox(.postgresql)
        #expect(try waitUntil(30) { try fixture.sql("SELECT extract(epoch FROM now() - pg_postmaster_start_time()) > 8") == "t" })
        let scheme = try fixture.scheme("Never", "true")
        let fresh = try #require(try fixture.enqueue(scheme).first)
        let stale = try #require(try fixture.enqueue(scheme).first)
        // Two builds "running" under a runner on another host (no process
        // here): one beat a second ago by the server's clock (every 10 s),
        // one a minute ago (every 2 s).
        _ = try fixture.sql("""
            UPDATE builds SET status = 'running', runnerId = 'elsewhere', runnerHost = 'ci-far', runnerPid = 4242,
                              runnerStartedAt = extract(epoch FROM now()) - 600, attempts = 1,
                              heartbeatInterval = CASE id WHEN '\(fresh)' THEN 10 ELSE 2 END,
                              startDate = extract(epoch FROM now()) - 120,
                              heartbeatAt = extract(epoch FROM now()) - CASE id WHEN '\(fresh)' THEN 1 ELSE 60 END
            WHERE id IN ('\(fresh)', '\(stale)')
            """)
        let taker = try fixture.startRunner(["--heartbeat", "0.3"])
        // Lapsed, then found lapsed still a heartbeat (2 s) later: taken back.
        let tookBack = try waitUntil(20) {
            try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(stale)' AND category = 'runner'") == "1"
        }
        // The fresh build stays its runner's for a while after (the
        // waiting is what is tested: nothing may happen in it).
        usleep(1_000_000)
        kill(taker.pid, SIGTERM)
        let result = taker.finish()
        #expect(tookBack, "\(result.stderr)")
        let note = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(stale)' AND category = 'runner'")
        #expect(note.hasPrefix("taken back from runner pid 4242 on ci-far (started "), "\(note)")
        #expect(note.contains("it beats every 2 s, stale after 3") && !note.contains("its process"), "\(note)")
        // The other one beat within three periods by the server: left to its runner.
        #expect(try fixture.sql("SELECT status, runnerId, attempts FROM builds WHERE id = '\(fresh)'") == "running|elsewhere|1")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(fresh)'") == "0")
    }
}
