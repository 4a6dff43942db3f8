import Foundation
import Testing
import Git
@testable import Jobs
import Store

@Suite struct JobRunTests {
    @Test func aSucceedingBuildIsCheckedOutLoggedAndRecorded() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("""
            echo "[1/4] Compiling a.c"
            echo "src/a.c:3:1: warning: unused variable 'x'" >&2
            echo "[2/4] Compiling b.c"
            echo "[4/4] Linking app"
            echo "Running tests..."
            echo "ok 1 - adds"
            echo "version=$OPSH_BUILD_VERSION id=$OPSH_BUILD_ID scheme=$OPSH_SCHEME file=$(cat version.txt)"
            """)
        let created = try fixture.jobs.create(scheme: scheme.id, version: "1.0.0")
        #expect(created.status == .queued)
        #expect(created.buildNumber == 1)
        #expect(try fixture.jobs.create(scheme: scheme.id, version: "1.1.0").buildNumber == 2)

        try fixture.jobs.start(created.id)
        let build = try fixture.jobs.wait(created.id, timeout: 10)
        #expect(build.status == .succeeded)
        #expect(build.exitCode == 0)
        #expect(build.progress == 1)
        let start = try #require(build.startDate)
        let end = try #require(build.endDate)
        #expect(start >= created.createdAt.addingTimeInterval(-0.001) && end >= start)
        #expect(build.commitHash == (try sh("git -C '\(fixture.repository)' rev-parse 1.0.0")))
        #expect(build.runnerPid == Int(getpid()))
        #expect(build.runnerHost == RunnerIdentity.current.host)

        let lines = try fixture.allLogs(build.id)
        let contents = lines.map(\.record.content)
        func line(_ text: String) -> BuildLogRecord? { lines.first { $0.record.content == text }?.record }
        #expect(lines.first?.record.category == "checkout")
        #expect(lines.contains { $0.record.category == "checkout" && $0.record.content.hasPrefix("$ git clone --no-checkout --shared") })
        #expect(line("[1/4] Compiling a.c")?.category == "build")
        #expect(line("[1/4] Compiling a.c")?.level == .info)
        #expect(line("src/a.c:3:1: warning: unused variable 'x'")?.level == .warning)
        #expect(line("Running tests...")?.category == "test")
        #expect(line("ok 1 - adds")?.category == "test")
        #expect(contents.contains("version=1.0.0 id=\(build.id) scheme=App file=1.0.0"))
        #expect(contents.last?.hasPrefix("build succeeded (exit code 0)") == true)
        // Cursors increase; the tail is the end of the same sequence.
        #expect(lines.map(\.cursor) == lines.map(\.cursor).sorted())
        #expect(try fixture.jobs.logs(build.id, tail: 3).map(\.cursor) == lines.suffix(3).map(\.cursor))
        #expect(try fixture.jobs.logs(build.id, after: lines[2].cursor, limit: 2).map(\.cursor) == lines[3...4].map(\.cursor))

        let workspace = fixture.jobs.workspacePath(build.id)
        #expect(workspace == fixture.directory.file("data/workspaces/\(build.id)"))
        #expect(try String(contentsOfFile: workspace + "/version.txt", encoding: .utf8) == "1.0.0\n")
        #expect(try fixture.jobs.crashLogs(build.id).isEmpty)
    }

    @Test func progressAndLinesArriveWhileTheBuildRunsAndExit3Fails() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("""
            echo "[1/4] first step"
            while [ ! -f go ]; do sleep 0.01; done
            echo "[3/4] third step"
            echo "error: something broke" >&2
            exit 3
            """)
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.1.0")
        let running = try eventually { try fixture.jobs.get(build.id).progress == 0.25 }
        #expect(running)
        #expect(try fixture.jobs.get(build.id).status == .running)
        let seen = try fixture.jobs.logs(build.id, after: 0)
        #expect(seen.map(\.record.content).contains("[1/4] first step"))

        try sh("touch '\(fixture.jobs.workspacePath(build.id))/go'")
        let ended = try fixture.jobs.wait(build.id, timeout: 10)
        #expect(ended.status == .failed)
        #expect(ended.exitCode == 3)
        #expect(ended.progress == 0.75)
        // Following from the last line seen gives exactly the rest.
        let rest = try fixture.jobs.logs(build.id, after: try #require(seen.last).cursor)
        #expect(rest.map(\.record.content).prefix(2) == ["[3/4] third step", "error: something broke"])
        #expect(rest.first { $0.record.content == "error: something broke" }?.record.level == .error)
        #expect(rest.last?.record.content.hasPrefix("build failed with exit code 3") == true)
        #expect(rest.last?.record.level == .error)
        #expect(Set(rest.map(\.cursor)).isDisjoint(with: seen.map(\.cursor)))
    }

    @Test func aBuildKilledBySIGSEGVGetsACrashLog() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("""
            for i in $(seq 1 80); do echo "line $i"; done
            echo "last words" >&2
            kill -SEGV $$
            """)
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        let ended = try fixture.jobs.wait(build.id, timeout: 10)
        #expect(ended.status == .failed)
        #expect(ended.exitCode == 128 + 11)
        let crashes = try fixture.jobs.crashLogs(build.id)
        #expect(crashes.count == 1)
        let crash = try #require(crashes.first)
        #expect(crash.signal == 11)
        #expect(UUID(uuidString: crash.incidentIdentifier) != nil)
        let crashLines = crash.content.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(crashLines.count == 50)
        #expect(crashLines.first == "line 32")
        #expect(crashLines.last == "last words")
        let last = try #require(try fixture.jobs.logs(build.id, tail: 1).first)
        #expect(last.record.content.contains("killed by signal SIGSEGV (11)"))
        #expect(last.record.content.contains(crash.incidentIdentifier))
    }

    @Test func aBuildPrintingManyLinesKeepsThemAllInOrder() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("seq 1 30000; seq 1 500 >&2")
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        #expect(try fixture.jobs.wait(build.id, timeout: 30).status == .succeeded)
        let lines = try fixture.allLogs(build.id).map(\.record)
        let numbers = lines.filter { $0.category == "build" }.compactMap { Int($0.content) }
        #expect(numbers.count == 30_500)
        #expect(numbers.filter { $0 > 500 } == Array(501...30_000))
        #expect(Set(lines.map(\.id)).count == lines.count)
        #expect(lines.map(\.createdAt) == lines.map(\.createdAt).sorted())
    }

    @Test func cancelKillsTheWholeGroupAfterTheGracePeriod() throws {
        let fixture = try Fixture(cancelGracePeriod: 0.3)
        let scheme = try fixture.scheme("""
            trap '' TERM
            sleep 30 &
            echo $! > child.pid
            echo started
            wait
            echo "never printed"
            """)
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        let childText = waitForFile(fixture.jobs.workspacePath(build.id) + "/child.pid")
        let child = try #require(childText.flatMap { Int32($0) })
        #expect(isRunning(child))

        let cancelledAt = Date()
        #expect(try fixture.jobs.cancel(build.id))
        let ended = try fixture.jobs.wait(build.id, timeout: 10)
        let took = Date().timeIntervalSince(cancelledAt)
        #expect(ended.status == .cancelled)
        #expect(ended.exitCode == 128 + 9)
        #expect(took >= 0.3, "SIGTERM was ignored: only SIGKILL after the grace period ends it")
        #expect(took < 5)
        // SIGKILL is delivered asynchronously: give a loaded machine a moment.
        let deadline = Date().addingTimeInterval(3)
        while isRunning(child), Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(!isRunning(child), "the background child in the group is dead too")
        let last = try #require(try fixture.jobs.logs(build.id, tail: 1).first)
        #expect(last.record.content.hasPrefix("build cancelled (SIGKILL after the 0.3 s grace period)"))
        #expect(try fixture.jobs.crashLogs(build.id).isEmpty)
        #expect(try fixture.jobs.cancel(build.id) == false, "an ended build is left alone")
    }

    @Test func cancelOfABuildThatHonoursSIGTERMIsQuick() throws {
        let fixture = try Fixture(cancelGracePeriod: 5)
        let scheme = try fixture.scheme("echo started; sleep 600; echo never")
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        #expect(try eventually { try fixture.jobs.logs(build.id, tail: 5).contains { $0.record.content == "started" } })
        let cancelledAt = Date()
        try fixture.jobs.cancel(build.id)
        let ended = try fixture.jobs.wait(build.id, timeout: 10)
        #expect(ended.status == .cancelled)
        #expect(Date().timeIntervalSince(cancelledAt) < 2)
        #expect(!(try fixture.allLogs(build.id).contains { $0.record.content == "never" }))
    }

    @Test func deleteRefusesARunningBuildAndRemovesEverythingOfAnEndedOne() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("echo working; while [ ! -f go ]; do sleep 0.01; done; kill -ABRT $$")
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        let workspace = fixture.jobs.workspacePath(build.id)
        #expect(try eventually { try fixture.jobs.logs(build.id, tail: 5).contains { $0.record.content == "working" } })
        #expect(throws: JobError.buildIsRunning(build.id)) { try fixture.jobs.delete(build.id) }

        try sh("touch '\(workspace)/go'")
        #expect(try fixture.jobs.wait(build.id, timeout: 10).status == .failed)
        #expect(try fixture.jobs.crashLogs(build.id).count == 1)
        #expect(FileManager.default.fileExists(atPath: workspace))

        try fixture.jobs.delete(build.id)
        #expect(!FileManager.default.fileExists(atPath: workspace))
        #expect(throws: JobError.unknownBuild(build.id)) { try fixture.jobs.get(build.id) }
        let leftovers = try fixture.store.client.read { db in
            (try fixture.store.buildLogs.records.count(db, ListRequest(filters: [ColumnFilter("buildId", .equal, build.id)])),
             try fixture.store.crashLogs.records.count(db, ListRequest(filters: [ColumnFilter("buildId", .equal, build.id)])))
        }
        #expect(leftovers == (0, 0))
    }

    @Test func withOneSlotTheSecondBuildWaitsQueuedInOrder() throws {
        let fixture = try Fixture(maxConcurrentJobs: 1)
        let scheme = try fixture.scheme("echo \"$OPSH_BUILD_NUMBER\"; while [ ! -f go ]; do sleep 0.01; done")
        let first = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        let second = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        let third = try fixture.jobs.run(scheme: scheme.id, version: "1.1.0")
        func printed(_ build: BuildRecord) throws -> Bool {
            try fixture.jobs.logs(build.id, tail: 5).contains { $0.record.content == String(build.buildNumber) }
        }
        #expect(try eventually { try printed(first) })
        // The others stay queued a while after (the waiting is what is
        // tested: nothing may start in it).
        usleep(200_000)
        #expect(try fixture.jobs.get(second.id).status == .queued)
        #expect(try fixture.jobs.get(third.id).status == .queued)
        #expect(fixture.jobs.isHandling(second.id))

        // Cancelling a waiting build ends it without running it.
        #expect(try fixture.jobs.cancel(third.id))
        #expect(try fixture.jobs.wait(third.id, timeout: 1).status == .cancelled)
        #expect(try fixture.jobs.get(third.id).startDate == nil)

        try sh("touch '\(fixture.jobs.workspacePath(first.id))/go'")
        #expect(try fixture.jobs.wait(first.id, timeout: 10).status == .succeeded)
        #expect(try eventually { try printed(second) })
        try sh("touch '\(fixture.jobs.workspacePath(second.id))/go'")
        let secondEnded = try fixture.jobs.wait(second.id, timeout: 10)
        #expect(secondEnded.status == .succeeded)
        let firstEnded = try fixture.jobs.get(first.id)
        #expect(try #require(secondEnded.startDate) >= (try #require(firstEnded.endDate)))
    }

    @Test func aMissingVersionFailsTheBuildWithGitsMessage() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("echo should not run")
        let build = try fixture.jobs.run(scheme: scheme.id, version: "9.9.9")
        let ended = try fixture.jobs.wait(build.id, timeout: 10)
        #expect(ended.status == .failed)
        #expect(ended.exitCode == nil)
        let last = try #require(try fixture.jobs.logs(build.id, tail: 1).first?.record)
        #expect(last.category == "checkout")
        #expect(last.level == .error)
        #expect(last.content.contains("version '9.9.9' not found"))
        #expect(last.content.contains("fatal: invalid reference: 9.9.9"))
        #expect(!(try fixture.allLogs(build.id).contains { $0.record.content == "should not run" }))
        #expect(!FileManager.default.fileExists(atPath: fixture.jobs.workspacePath(build.id)))
    }
}

@Suite struct JobErrorTests {
    @Test func unknownIdsSchemesWithoutCommandsAndProjectsWithoutRepositoriesAreRefused() throws {
        let fixture = try Fixture()
        let jobs = fixture.jobs
        #expect(throws: JobError.unknownBuild("nope")) { try jobs.start("nope") }
        #expect(throws: JobError.unknownBuild("nope")) { try jobs.cancel("nope") }
        #expect(throws: JobError.unknownBuild("nope")) { try jobs.wait("nope", timeout: 0.1) }
        #expect(throws: JobError.unknownBuild("nope")) { try jobs.logs("nope", after: 0) }
        #expect(throws: JobError.unknownBuild("nope")) { try jobs.delete("nope") }
        #expect(throws: JobError.unknownScheme("nope")) { try jobs.create(scheme: "nope", version: "1.0.0") }

        let empty = try fixture.scheme("  \n", name: "Empty")
        #expect(throws: JobError.schemeHasNoBuildCommand(schemeId: empty.id, name: "Empty")) {
            try jobs.create(scheme: empty.id, version: "1.0.0")
        }
        let scheme = try fixture.scheme("true")
        #expect(throws: JobError.invalidVersion("--help")) { try jobs.create(scheme: scheme.id, version: "--help") }

        // A build created while it could run, started after its project lost its repository.
        let build = try jobs.create(scheme: scheme.id, version: "1.0.0")
        try fixture.store.client.write { db in
            var project = try fixture.store.projects.records.require(db, "com.example.app")
            project.gitRepositoryURL = ""
            try fixture.store.projects.records.update(db, project)
        }
        #expect(throws: JobError.projectHasNoRepository(project: "com.example.app")) { try jobs.start(build.id) }
        #expect(JobError.projectHasNoRepository(project: "com.example.app").description
            == "project com.example.app has no git repository; set projects.gitRepositoryURL first")
        #expect(throws: JobError.notStarted(build.id)) { try jobs.wait(build.id) }
    }

    @Test func waitTimesOutAndStartTwiceIsRefused() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("while [ ! -f go ]; do sleep 0.01; done")
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        #expect(throws: JobError.alreadyStarted(build.id)) { try fixture.jobs.start(build.id) }
        let before = Date()
        #expect(throws: JobError.timedOut(id: build.id, seconds: 0.2)) { try fixture.jobs.wait(build.id, timeout: 0.2) }
        #expect(Date().timeIntervalSince(before) >= 0.2)
        try fixture.jobs.cancel(build.id)
        #expect(try fixture.jobs.wait(build.id, timeout: 10).status == .cancelled)
        #expect(throws: JobError.notQueued(id: build.id, status: .cancelled)) { try fixture.jobs.start(build.id) }
    }
}

@Suite struct StaleBuildTests {
    @Test func aRunningBuildWhoseRunnerIsDeadIsStaleAndCanBeMarkedFailed() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("true")
        // A process that has ended: its pid names nobody now.
        let child = try ChildProcess.start("/bin/true", [], environment: [:])
        _ = child.finish()
        let me = RunnerIdentity.current
        let (dead, alive, anonymous) = try fixture.store.client.write { db in
            func running(_ number: Int, host: String?, pid: Int?, startedAt: Double?) throws -> BuildRecord {
                try fixture.store.builds.records.insert(db, BuildRecord(
                    schemeId: scheme.id, versionString: "1.0.0", buildNumber: number, status: .running,
                    startDate: Date(), runnerHost: host, runnerPid: pid,
                    runnerStartedAt: startedAt.map { Date(timeIntervalSince1970: $0) }))
            }
            return (try running(1, host: me.host, pid: Int(child.pid), startedAt: me.startedAt),
                    try running(2, host: me.host, pid: me.pid, startedAt: me.startedAt),
                    try running(3, host: nil, pid: nil, startedAt: nil))
        }
        #expect(try fixture.jobs.staleBuilds().map(\.id) == [dead.id])

        #expect(throws: JobError.runnerAlive(id: alive.id, host: me.host, pid: me.pid)) {
            try fixture.jobs.markStale(alive.id, reason: "looks stuck")
        }
        #expect(throws: JobError.runByAnotherProcess(id: anonymous.id, host: "?", pid: 0)) {
            try fixture.jobs.cancel(anonymous.id)
        }

        let marked = try fixture.jobs.markStale(dead.id, reason: "opsh was killed during the build")
        #expect(marked.status == .failed)
        #expect(marked.endDate != nil)
        let line = try #require(try fixture.jobs.logs(dead.id, tail: 1).first?.record)
        #expect(line.level == .error)
        #expect(line.content.hasPrefix("marked failed as stale: opsh was killed during the build (runner pid \(child.pid) on \(me.host) is gone)"))
        #expect(try fixture.jobs.staleBuilds().isEmpty)
        #expect(throws: JobError.notRunning(id: dead.id, status: .failed)) { try fixture.jobs.markStale(dead.id, reason: "again") }

        let forced = try fixture.jobs.markStale(alive.id, reason: "hung", force: true)
        #expect(forced.status == .failed)
    }
}
