import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `opsh runner --db postgresql://…` (README, "Build runners"): the same
/// runner as on SQLite over PostgresBuildQueue, on a real server; every
/// assertion read from the database by psql.
@Suite struct PostgresRunnerTests {
    @Test func threeRunnersOnOnePostgresDatabaseRunThirtyQueuedBuildsEachExactlyOnce() throws {
        let fixture = try RunnerSandbox(postgres: true)
        let scheme = try fixture.scheme("Append", """
            echo "$OPSH_BUILD_ID" >> '\(fixture.ranFile)'; echo "ran $OPSH_BUILD_ID"; sleep 0.1
            """)
        let ids = try fixture.enqueue(scheme, count: 30)
        #expect(ids.count == 30)
        let runners = try (0..<3).map { _ in try fixture.startRunner(["--concurrency", "2", "--heartbeat", "0.5"]) }
        let allDone = try waitUntil(60) { try fixture.sql("SELECT count(*) FROM builds WHERE status = 'succeeded'") == "30" }
        for runner in runners { kill(runner.pid, SIGTERM) }
        let results = runners.map { $0.finish() }
        let statuses = try fixture.sql("SELECT status, count(*) FROM builds GROUP BY status")
        #expect(allDone, "statuses: \(statuses)\n\(results.map(\.stderr).joined(separator: "\n"))")

        for result in results {
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("SIGTERM: claiming no more builds"), "\(result.stderr)")
            #expect(!result.stderr.contains("problem:"), "\(result.stderr)")
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
        // Each recorded its runner: this host, one of the three pids, and
        // all three did work (the database says so, not only their logs).
        let pids = Set(runners.map { String($0.pid) })
        let recorded = try fixture.sql("SELECT runnerPid FROM builds GROUP BY runnerPid").split(separator: "\n").map(String.init)
        #expect(Set(recorded) == pids, "\(recorded) against \(pids); claims per runner: \(claims)")
        #expect(try fixture.sql("SELECT DISTINCT runnerHost FROM builds") == hostName())
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE runnerStartedAt IS NULL OR heartbeatAt IS NULL OR commitHash IS NULL") == "0")
        // Times are the server's: every start and end within the test's run, ends after starts.
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE NOT (startDate <= endDate AND endDate <= extract(epoch FROM now()))") == "0")
    }

    @Test func aBuildOfARunnerKilledMidBuildIsRequeuedByAnotherWithinAFewHeartbeatsAndRunAgain() throws {
        let fixture = try RunnerSandbox(postgres: true)
        let (build, killed, taker, tookBackIn) = try fixture.killARunnerMidBuild(maxAttempts: 3)
        #expect(tookBackIn < 4, "taken back \(tookBackIn) s after the kill (heartbeat 0.4 s, stale after 3)")
        let succeeded = try waitUntil(20) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" }
        kill(taker.pid, SIGTERM)
        let takerResult = taker.finish()
        _ = killed.finish()
        let status = try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'")
        #expect(succeeded, "\(status) \(takerResult.stderr)")
        #expect(takerResult.status == 0)

        // The log line says who was lost, when it last beat (the server's clock), and what was done.
        let note = try fixture.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'")
        #expect(note.hasPrefix("warning: taken back from runner pid \(killed.pid) on \(hostName()) (started "), "\(note)")
        #expect(note.contains("no heartbeat since") && note.contains("it beats every 0.4 s, stale after 3"), "\(note)")
        #expect(note.contains("requeued by runner pid \(taker.pid) on \(hostName()) (attempt 1 of 3 was lost: the build did not fail, its runner stopped)"), "\(note)")
        #expect(takerResult.stderr.contains("build \(build) requeued: taken back from runner pid \(killed.pid)"), "\(takerResult.stderr)")
        // Run again by the taker, as its second attempt, in a folder of its own.
        #expect(try fixture.sql("SELECT runnerPid, attempts FROM builds WHERE id = '\(build)'") == "\(taker.pid)|2")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'second attempt'") == "1")
        let folders = try String(contentsOfFile: fixture.root + "/attempts.txt", encoding: .utf8)
            .split(separator: "\n").map { $0.split(separator: " ", maxSplits: 1).last.map(String.init) ?? "" }
        #expect(folders.count == 2 && folders[0].hasSuffix("/\(build)") && folders[1] == folders[0] + ".attempt-2", "\(folders)")
        // Workspaces in opsh's data folder of the machine (no database file to put them beside).
        #expect(folders.first?.hasPrefix(fixture.root + "/data/opsh/workspaces/") == true, "\(folders)")
    }

    /// The fleet of README's "A fleet on PostgreSQL" on one machine: three
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
        let fixture = try RunnerSandbox(on: hosts.server)
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
        let allDone = try waitUntil(60) { try fixture.sql("SELECT count(*) FROM builds WHERE status = 'succeeded'") == "30" }
        // Their connections, while they are still up: from those three addresses only.
        let clientsAtEnd = try fixture.sql(clients)
        for runner in runners { kill(runner.pid, SIGTERM) }
        let results = runners.map { $0.finish() }
        let statuses = try fixture.sql("SELECT status, count(*) FROM builds GROUP BY status")
        #expect(allDone, "statuses: \(statuses)\n\(results.map(\.stderr).joined(separator: "\n"))")
        for result in results {
            #expect(result.status == 0, "\(result.stderr)")
            #expect(!result.stderr.contains("problem:"), "\(result.stderr)")
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

    @Test func aBuildThatUsedItsAttemptsIsMarkedFailedSayingWhy() throws {
        let fixture = try RunnerSandbox(postgres: true)
        let (build, killed, taker, _) = try fixture.killARunnerMidBuild(maxAttempts: 1)
        kill(taker.pid, SIGTERM)
        let takerResult = taker.finish()
        _ = killed.finish()
        #expect(try fixture.sql("SELECT status, endDate IS NOT NULL FROM builds WHERE id = '\(build)'") == "failed|t")
        let note = try fixture.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'")
        #expect(note.hasPrefix("error: taken back from runner pid \(killed.pid) on \(hostName())"), "\(note)")
        #expect(note.contains("marked failed by runner pid \(taker.pid) on \(hostName()): it was started 1 time(s) and its runner stopped each time (at most 1 attempts)"), "\(note)")
        #expect(takerResult.stderr.contains("build \(build) marked failed: taken back"), "\(takerResult.stderr)")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'second attempt'") == "0")
    }

    /// A runner's heartbeat is judged by the server's clock: a build whose
    /// recorded heartbeat is recent by the server is never taken back,
    /// whatever the runner's machine thinks; one old by the server is.
    @Test func stalenessIsJudgedByTheServersClock() throws {
        let fixture = try RunnerSandbox(postgres: true)
        let scheme = try fixture.scheme("Never", "true")
        let fresh = try #require(try fixture.enqueue(scheme).first)
        let stale = try #require(try fixture.enqueue(scheme).first)
        // Two builds "running" under a runner on another host (no process
        // here): one beat a second ago by the server's clock, one a minute ago.
        _ = try fixture.sql("""
            UPDATE builds SET status = 'running', runnerId = 'elsewhere', runnerHost = 'ci-far', runnerPid = 4242,
                              runnerStartedAt = extract(epoch FROM now()) - 600, heartbeatInterval = 10, attempts = 1,
                              startDate = extract(epoch FROM now()) - 120,
                              heartbeatAt = extract(epoch FROM now()) - CASE id WHEN '\(fresh)' THEN 1 ELSE 60 END
            WHERE id IN ('\(fresh)', '\(stale)')
            """)
        let taker = try fixture.startRunner(["--heartbeat", "0.3"])
        let tookBack = try waitUntil(10) {
            try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(stale)' AND category = 'runner'") == "1"
        }
        usleep(1_000_000)
        kill(taker.pid, SIGTERM)
        let result = taker.finish()
        #expect(tookBack, "\(result.stderr)")
        let note = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(stale)' AND category = 'runner'")
        #expect(note.hasPrefix("taken back from runner pid 4242 on ci-far (started "), "\(note)")
        #expect(note.contains("it beats every 10 s, stale after 3") && !note.contains("its process"), "\(note)")
        // The other one beat within three periods by the server: left to its runner.
        #expect(try fixture.sql("SELECT status, runnerId, attempts FROM builds WHERE id = '\(fresh)'") == "running|elsewhere|1")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(fresh)'") == "0")
    }

    @Test func sigtermLetsTheRunningBuildFinishAndLeavesLaterBuildsQueued() throws {
        let fixture = try RunnerSandbox(postgres: true)
        let go = fixture.root + "/go"
        let scheme = try fixture.scheme("Gated", "echo started; while [ ! -f '\(go)' ]; do sleep 0.02; done; echo done")
        let build = try #require(try fixture.enqueue(scheme).first)
        let runner = try fixture.startRunner(["--concurrency", "1", "--heartbeat", "0.3"])
        #expect(try waitUntil(20) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'started'") == "1" })
        kill(runner.pid, SIGTERM)
        let later = try #require(try fixture.enqueue(scheme).first)
        usleep(800_000)
        #expect(kill(runner.pid, 0) == 0, "the runner exited with its build running")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "running")
        FileManager.default.createFile(atPath: go, contents: nil)
        let result = runner.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("SIGTERM: claiming no more builds; waiting for 1 running build(s) to finish"), "\(result.stderr)")
        #expect(result.stderr.contains("build \(build) (com.example.app Gated #1) succeeded (exit code 0)"), "\(result.stderr)")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'done'") == "1")
        // Queued after the SIGTERM: left for other runners, held by nobody.
        #expect(try fixture.sql("SELECT status, runnerId IS NULL FROM builds WHERE id = '\(later)'") == "queued|t")
    }

    @Test func aSecondSigtermCancelsTheRunningBuildWithALogLineAndExits143() throws {
        let fixture = try RunnerSandbox(postgres: true)
        let scheme = try fixture.scheme("Endless", "echo started; while true; do sleep 0.02; done")
        let build = try #require(try fixture.enqueue(scheme).first)
        let runner = try fixture.startRunner(["--heartbeat", "0.3"])
        #expect(try waitUntil(20) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'started'") == "1" })
        kill(runner.pid, SIGTERM)
        usleep(300_000)
        kill(runner.pid, SIGTERM)
        let result = runner.finish()
        #expect(result.status == 143, "\(result.stderr)")
        #expect(result.stderr.contains("SIGTERM: cancelling 1 running build(s)"), "\(result.stderr)")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "cancelled")
        let line = try fixture.sql("SELECT content FROM buildLogs WHERE buildId = '\(build)' AND content LIKE 'build cancelled%'")
        #expect(line.hasPrefix("build cancelled (SIGTERM)"), "\(line)")
        #expect(line.hasSuffix(": opsh runner pid \(runner.pid) on \(hostName()) was stopped (SIGTERM)"), "\(line)")
    }

    @Test func aRunnerRefusesADatabaseWithoutTheSchemaAndAnUnknownScheme() throws {
        let server = try PostgresServer.shared()
        let sandbox = try Sandbox()
        let empty = try server.makeDatabase()
        let refused = sandbox.finish(try sandbox.start(opshExecutable, ["runner", "--db", empty]))
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(refused.stderr.contains("has no opsh schema"), "\(refused.stderr)")
        // Control: with the schema, an unknown --scheme is the refusal (exit 2), not the database.
        let fixture = try RunnerSandbox(postgres: true)
        let unknown = fixture.sandbox.finish(try fixture.startRunner(["--scheme", "Nope"]))
        #expect(unknown.status == 2, "\(unknown.stderr)")
        #expect(unknown.stderr.hasPrefix("opsh: error: --scheme 'Nope': no scheme has that id or name"), "\(unknown.stderr)")
    }
}
