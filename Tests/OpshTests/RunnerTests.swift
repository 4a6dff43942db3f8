import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct RunnerTests {
    @Test func threeRunnersOnOneDatabaseRunThirtyQueuedBuildsEachExactlyOnce() throws {
        let fixture = try RunnerSandbox()
        let scheme = try fixture.scheme("Append", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'; sleep 0.1")
        let ids = try fixture.enqueue(scheme, count: 30)
        #expect(ids.count == 30)
        let runners = try (0..<3).map { _ in try fixture.startRunner(["--concurrency", "2", "--heartbeat", "0.5"]) }
        let allDone = try waitUntil(50) { try fixture.sql("SELECT count(*) FROM builds WHERE status = 'succeeded'") == "30" }
        for runner in runners { kill(runner.pid, SIGTERM) }
        let results = runners.map { $0.finish() }
        let statuses = try fixture.sql("SELECT status, count(*) FROM builds GROUP BY status")
        #expect(allDone, "statuses: \(statuses)")

        for result in results {
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("SIGTERM: claiming no more builds"), "\(result.stderr)")
        }
        // Each build ran once: its id once in the file, one attempt, one claim in all the logs.
        let ran = fixture.ranIds()
        #expect(ran.count == 30, "\(ran.count) runs")
        #expect(Set(ran) == Set(ids))
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE attempts = 1") == "30")
        let claims = results.map { $0.stderr.components(separatedBy: "claimed build ").count - 1 }
        #expect(claims.reduce(0, +) == 30, "claims per runner: \(claims)")
        // Each recorded its runner: this host, one of the three pids; more than one did work.
        let pids = Set(runners.map { String($0.pid) })
        let recorded = try fixture.sql("SELECT DISTINCT runnerPid FROM builds").split(separator: "\n").map(String.init)
        #expect(Set(recorded).isSubset(of: pids), "\(recorded) not among \(pids)")
        #expect(recorded.count > 1, "only \(recorded) did work")
        #expect(try fixture.sql("SELECT DISTINCT runnerHost FROM builds") == hostName())
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE runnerStartedAt IS NULL OR heartbeatAt IS NULL") == "0")
    }

    @Test func aBuildOfARunnerKilledMidBuildIsRequeuedWithinAFewHeartbeatsAndRunAgain() throws {
        let fixture = try RunnerSandbox()
        let (build, killed, taker, tookBackIn) = try fixture.killARunnerMidBuild(maxAttempts: 3)
        #expect(tookBackIn < 4, "taken back \(tookBackIn) s after the kill (heartbeat 0.4 s, stale after 3)")
        let succeeded = try waitUntil(20) { try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded" }
        kill(taker.pid, SIGTERM)
        let takerResult = taker.finish()
        _ = killed.finish()
        let status = try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'")
        #expect(succeeded, "\(status) \(takerResult.stderr)")
        #expect(takerResult.status == 0)

        let note = try fixture.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'")
        #expect(note.hasPrefix("warning: taken back from runner pid \(killed.pid) on \(hostName()) (started "), "\(note)")
        #expect(note.contains("no heartbeat since") && note.contains("it beats every 0.4 s, stale after 3"), "\(note)")
        #expect(note.contains("requeued by runner pid \(taker.pid) on \(hostName()) (attempt 1 of 3 was lost"), "\(note)")
        #expect(takerResult.stderr.contains("build \(build) requeued: taken back from runner pid \(killed.pid)"), "\(takerResult.stderr)")
        #expect(!takerResult.stderr.contains("claimed build") && !takerResult.stderr.contains("started: pid")
                && !takerResult.stderr.contains("succeeded"), "--quiet said more: \(takerResult.stderr)")
        // Run again by the taker, as its second attempt.
        #expect(try fixture.sql("SELECT runnerPid, attempts FROM builds WHERE id = '\(build)'") == "\(taker.pid)|2")
        let log = try fixture.sql("SELECT level || ' ' || content FROM buildLogs WHERE buildId = '\(build)' ORDER BY createdAt, rowid")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'second attempt'") == "1", "\(log)\n\(takerResult.stderr)")
        // The second attempt checked out into a folder of its own: the
        // killed runner's processes may still write in the first.
        let folders = try String(contentsOfFile: fixture.root + "/attempts.txt", encoding: .utf8)
            .split(separator: "\n").map { $0.split(separator: " ", maxSplits: 1).last.map(String.init) ?? "" }
        #expect(folders.count == 2 && folders[0].hasSuffix("/\(build)") && folders[1] == folders[0] + ".attempt-2", "\(folders)")
    }

    @Test func aBuildThatUsedItsAttemptsIsMarkedFailedSayingWhy() throws {
        let fixture = try RunnerSandbox()
        let (build, killed, taker, _) = try fixture.killARunnerMidBuild(maxAttempts: 1)
        kill(taker.pid, SIGTERM)
        let takerResult = taker.finish()
        _ = killed.finish()
        #expect(try fixture.sql("SELECT status, endDate IS NOT NULL FROM builds WHERE id = '\(build)'") == "failed|1")
        let note = try fixture.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = '\(build)' AND category = 'runner'")
        #expect(note.hasPrefix("error: taken back from runner pid \(killed.pid) on \(hostName())"), "\(note)")
        #expect(note.contains("marked failed by runner pid \(taker.pid) on \(hostName()): it was started 1 time(s) and its runner stopped each time (at most 1 attempts)"), "\(note)")
        #expect(takerResult.stderr.contains("build \(build) marked failed: taken back"), "\(takerResult.stderr)")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'second attempt'") == "0")
    }

    @Test func sigtermLetsTheRunningBuildFinishClaimsNothingMoreAndExits0() throws {
        let fixture = try RunnerSandbox()
        let go = fixture.root + "/go"
        let scheme = try fixture.scheme("Gated", "echo started; while [ ! -f '\(go)' ]; do sleep 0.02; done; echo done")
        let build = try #require(try fixture.enqueue(scheme).first)
        let runner = try fixture.startRunner(["--concurrency", "1", "--heartbeat", "0.3"])
        #expect(try waitUntil(20) { try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(build)' AND content = 'started'") == "1" })
        kill(runner.pid, SIGTERM)
        let later = try #require(try fixture.enqueue(scheme).first)
        // SIGTERM does not end a runner with a build running: still there a while later.
        usleep(800_000)
        #expect(kill(runner.pid, 0) == 0, "the runner exited with its build running")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "running")
        FileManager.default.createFile(atPath: go, contents: nil)
        let result = runner.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("SIGTERM: claiming no more builds; waiting for 1 running build(s) to finish"), "\(result.stderr)")
        #expect(result.stderr.contains("claimed build \(build) (com.example.app Gated #1, version 1.0.0)"), "\(result.stderr)")
        #expect(result.stderr.contains("build \(build) (com.example.app Gated #1) succeeded (exit code 0)"), "\(result.stderr)")
        #expect(result.stderr.contains("stopped (exit status 0)"), "\(result.stderr)")
        #expect(try fixture.sql("SELECT status FROM builds WHERE id = '\(build)'") == "succeeded")
        // Queued after the SIGTERM: left for other runners, held by nobody.
        #expect(try fixture.sql("SELECT status, runnerId IS NULL FROM builds WHERE id = '\(later)'") == "queued|1")
    }

    @Test func aSecondSigtermCancelsTheRunningBuildsWithALogLineAndExits143() throws {
        let fixture = try RunnerSandbox()
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

    @Test func jobsCancelInAShellStopsABuildARunnerRunsAtItsNextHeartbeat() throws {
        let fixture = try RunnerSandbox()
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

    @Test func jobsStartInAShellAndARunnerNeverBothRunOneBuild() throws {
        let fixture = try RunnerSandbox()
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
        let race = try fixture.sandbox.opsh(["run", script, scheme])
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

    @Test func aRunnerWithSchemesRunsOnlyTheirBuildsByNameOrId() throws {
        let fixture = try RunnerSandbox()
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
            #expect(try fixture.sql("SELECT status, runnerId IS NULL FROM builds WHERE id = '\(id)'") == "queued|1")
        }
    }

    @Test func usageErrorsAndADatabaseWithoutTheMigrationAreRefusedSayingWhy() throws {
        let fixture = try RunnerSandbox()
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
        _ = try fixture.sql("""
            DELETE FROM grdb_migrations WHERE identifier = '004_runners';
            DROP INDEX builds_on_status_created; DROP INDEX builds_on_runner;
            ALTER TABLE builds DROP COLUMN runnerId; ALTER TABLE builds DROP COLUMN heartbeatAt;
            ALTER TABLE builds DROP COLUMN heartbeatInterval; ALTER TABLE builds DROP COLUMN attempts;
            """)
        let old = fixture.sandbox.finish(try fixture.startRunner([]))
        #expect(old.status == 3)
        #expect(old.stderr.contains("this database lacks migration 004_runners, which opsh runner needs (a heartbeat per build): run `opsh migrate` first"), "\(old.stderr)")
        // jobs.start still runs builds there, as before 004.
        let scheme = try fixture.scheme("Append", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'")
        let ran = try fixture.lua("return jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 30).status", [scheme])
        #expect(ran == ["succeeded"])
    }
}
