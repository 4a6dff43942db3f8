import Foundation
import GRDB
import Testing
@testable import Jobs
import Store

/// A job manager holds every build it starts (BuildQueueQueries): a build
/// it waits to run cannot be claimed by a runner, a build another holder
/// has is refused with who holds it, its builds get heartbeats, and a
/// build taken back from it is stopped without recording an end.
@Suite struct BuildHoldingTests {
    /// Another holder (a runner in another process) with the given last heartbeat.
    static func otherHolder(pid: Int = 4242, interval: Double = 60) -> BuildHolder {
        BuildHolder(id: "other-runner", host: "ci-7", pid: pid, startedAt: 1_000, heartbeatInterval: interval)
    }

    func lease(_ fixture: Fixture, _ id: String) throws -> BuildLease {
        try #require(try fixture.store.client.read { db in try fixture.store.builds.lease(db, id) })
    }

    @Test func aBuildRunCreatesIsHeldFromItsCreationSoNoRunnerClaimsItWhileItWaits() throws {
        let fixture = try Fixture(maxConcurrentJobs: 1)
        let scheme = try fixture.scheme("while [ ! -f go ]; do sleep 0.01; done")
        let first = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        let waiting = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        #expect(try eventually { try fixture.jobs.get(first.id).status == .running })
        #expect(try fixture.jobs.get(waiting.id).status == .queued)
        #expect(try lease(fixture, waiting.id).runnerId == fixture.jobs.holder.id)

        // A runner's claim finds nothing: the queued build is held.
        let claimed = try fixture.store.client.write { db in
            try fixture.store.builds.reserveNext(db, for: Self.otherHolder(), schemes: nil)
        }
        #expect(claimed == nil)
        // A build nobody holds is what a runner claims (the control).
        let free = try fixture.jobs.create(scheme: scheme.id, version: "1.1.0")
        let claimedFree = try fixture.store.client.write { db in
            try fixture.store.builds.reserveNext(db, for: Self.otherHolder(), schemes: nil)
        }
        #expect(claimedFree?.id == free.id)

        fixture.jobs.cancelAll()
        #expect(try fixture.jobs.wait(first.id, timeout: 10).status == .cancelled)
        #expect(try fixture.jobs.wait(waiting.id, timeout: 10).status == .cancelled)
    }

    @Test func startRefusesABuildAnotherHolderHoldsSayingWhoAndTakesOneWhoseHolderStopped() throws {
        let fixture = try Fixture()
        let scheme = try fixture.scheme("echo ran")
        let held = try fixture.jobs.create(scheme: scheme.id, version: "1.0.0")
        _ = try fixture.store.client.write { db in try fixture.store.builds.reserve(db, held.id, for: Self.otherHolder()) }
        #expect(throws: JobError.heldByAnother(id: held.id, host: "ci-7", pid: 4242)) { try fixture.jobs.start(held.id) }
        #expect("\(JobError.heldByAnother(id: held.id, host: "ci-7", pid: 4242))"
                == "build \(held.id) was claimed first by pid 4242 on ci-7 (an opsh runner, or another opsh), which runs it; jobs.follow shows its log")
        #expect(!fixture.jobs.isHandling(held.id))
        #expect(try lease(fixture, held.id).runnerId == "other-runner")

        // Its holder's heartbeat lapsed (three intervals): start takes it.
        let lapsed = try fixture.jobs.create(scheme: scheme.id, version: "1.0.0")
        _ = try fixture.store.client.write { db in
            try fixture.store.builds.reserve(db, lapsed.id, for: Self.otherHolder(interval: 1), at: Date().addingTimeInterval(-3.5))
        }
        try fixture.jobs.start(lapsed.id)
        let ended = try fixture.jobs.wait(lapsed.id, timeout: 10)
        #expect(ended.status == .succeeded)
        let finalLease = try lease(fixture, lapsed.id)
        #expect(finalLease.runnerId == fixture.jobs.holder.id)
        #expect(finalLease.runnerPid == Int(getpid()))
        #expect(finalLease.attempts == 1)

        // A build a runner already runs is not queued.
        let running = try fixture.jobs.create(scheme: scheme.id, version: "1.0.0")
        _ = try fixture.store.client.write { db in
            _ = try fixture.store.builds.reserve(db, running.id, for: Self.otherHolder())
            _ = try fixture.store.builds.claim(db, running.id, for: Self.otherHolder())
        }
        #expect(throws: JobError.notQueued(id: running.id, status: .running)) { try fixture.jobs.start(running.id) }
    }

    @Test func theBuildsItHoldsGetAHeartbeatEachInterval() throws {
        let fixture = try Fixture { $0.heartbeatInterval = 0.1 }
        let scheme = try fixture.scheme("while [ ! -f go ]; do sleep 0.01; done")
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        #expect(try eventually { try fixture.jobs.get(build.id).status == .running })
        let first = try #require(try lease(fixture, build.id).heartbeatAt)
        #expect(try lease(fixture, build.id).heartbeatInterval == 0.1)
        #expect(try eventually { try (lease(fixture, build.id).heartbeatAt ?? 0) >= first + 0.2 })
        // Alive by its heartbeat: not stale, and markStale refuses without force.
        #expect(try fixture.jobs.staleBuilds().isEmpty)
        // Its checkout may take longer than the heartbeats on a busy machine.
        let workspace = fixture.jobs.workspacePath(build.id)
        #expect(eventually(timeout: 20) { FileManager.default.fileExists(atPath: workspace + "/version.txt") })
        try sh("touch '\(workspace)/go'")
        #expect(try fixture.jobs.wait(build.id, timeout: 10).status == .succeeded)
    }

    @Test func aBuildTakenBackFromItIsStoppedAndItsEndIsNotRecorded() throws {
        let messages = MessageLog()
        let fixture = try Fixture { configuration in
            configuration.heartbeatInterval = 0.1
            configuration.onNotice = { messages.append($0) }
        }
        let scheme = try fixture.scheme("echo started; while [ ! -f go ]; do sleep 0.01; done")
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        #expect(try eventually { try fixture.jobs.logs(build.id, tail: 5).contains { $0.record.content == "started" } })

        // Another runner takes it back, as after a lapsed heartbeat.
        let current = try lease(fixture, build.id)
        let took = try fixture.store.client.write { db in
            try fixture.store.builds.takeBack(db, current, .requeue, note: "taken back by a test")
        }
        #expect(took)
        #expect(try eventually { !fixture.jobs.isHandling(build.id) })
        let after = try fixture.jobs.get(build.id)
        #expect(after.status == .queued)
        #expect(after.runnerPid == nil)
        let contents = try fixture.allLogs(build.id).map(\.record.content)
        // Fenced (BuildFence): not a line of this run's after the take-back's.
        #expect(contents.last == "taken back by a test", "\(contents)")
        #expect(!contents.contains { $0.hasPrefix("build cancelled") })
        #expect(try eventually { messages.all.contains { $0.contains("lost this build") || $0.contains("is no longer this run's") } },
                "\(messages.all)")
        #expect(messages.all.contains { $0.hasPrefix("build \(build.id) was taken back from this opsh (its heartbeat lapsed); it is queued now: stopping its run here") })

        // A take-back is conditional on the lease it saw: a second one changes nothing.
        let second = try fixture.store.client.write { db in
            try fixture.store.builds.takeBack(db, current, .fail, note: "again")
        }
        #expect(!second)
    }
}

final class MessageLog: @unchecked Sendable {
    private let lock = NSLock()
    private var messages: [String] = []
    func append(_ message: String) { lock.withLock { messages.append(message) } }
    var all: [String] { lock.withLock { messages } }
}

/// A build's log while its database takes no writes (README, "Build
/// runners": a runner outlives a busy or restarting database).
@Suite struct LogSpoolTests {
    /// More lines than the sink holds in memory, printed while another
    /// process holds SQLite's write lock: they wait in a spool file beside
    /// the workspaces (the build is not held up), and land in order once
    /// the lock is gone; the file is removed.
    @Test func linesPrintedWhileTheDatabaseIsLockedWaitInASpoolFileAndLandInOrder() throws {
        let messages = MessageLog()
        let fixture = try Fixture { configuration in
            configuration.maxPendingLines = 50
            configuration.flushLineCount = 10
            configuration.onNotice = { messages.append($0) }
        }
        let go = fixture.directory.file("go")
        let printed = fixture.directory.file("printed")
        let scheme = try fixture.scheme("""
            echo started; while [ ! -f '\(go)' ]; do sleep 0.05; done
            i=0; while [ $i -lt 500 ]; do echo "line $i"; i=$((i+1)); done; touch '\(printed)'
            """)
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        #expect(try eventually(timeout: 30) { try fixture.jobs.logs(build.id, tail: 5).contains { $0.record.content == "started" } })

        let held = fixture.directory.file("held")
        let holder = try ChildProcess.start("/usr/bin/sqlite3", [fixture.store.path ?? ""], environment: ProcessInfo.processInfo.environment, stdin: """
            .timeout 10000
            BEGIN IMMEDIATE;
            .output \(held)
            .print held
            .output stdout

            """, keepingStdinOpen: true)
        #expect(waitForFile(held, timeout: 30) == "held", "sqlite3 never took the write lock")
        try Data().write(to: URL(fileURLWithPath: go))
        // The build printed all of it while nothing could be written: its
        // lines beyond the 50 in memory wait in the spool.
        let root = fixture.jobs.workspaces.root
        func spools() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).filter { $0.hasPrefix("opsh-log-spool-") }
        }
        #expect(eventually(timeout: 30) { FileManager.default.fileExists(atPath: printed) }, "the build was held up")
        #expect(eventually(timeout: 30) { !spools().isEmpty }, "\(messages.all)")
        holder.write("COMMIT;\n")
        holder.closeInput()
        _ = holder.finish()

        #expect(try fixture.jobs.wait(build.id, timeout: 60).status == .succeeded)
        let lines = try fixture.allLogs(build.id).map(\.record.content).filter { $0.hasPrefix("line ") }
        #expect(lines == (0..<500).map { "line \($0)" }, "\(lines.count) lines")
        #expect(spools().isEmpty)
        #expect(messages.all.contains { $0.contains("wait in \(root)/opsh-log-spool-") }, "\(messages.all)")
        #expect(messages.all.contains { $0.contains("no line was lost") }, "\(messages.all)")
    }
}
