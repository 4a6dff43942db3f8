import Foundation
import GRDB
import Testing
@testable import Store

/// The build queue's statements (BuildQueueQueries): the claim takes the
/// oldest unheld queued build of the schemes asked for, a live holder keeps
/// its build, a lapsed one loses it, and a take-back happens only under the
/// lease it read.
@Suite struct BuildQueueTests {
    static func holder(_ id: String, interval: Double = 10) -> BuildHolder {
        BuildHolder(id: id, host: "ci-1", pid: 100, startedAt: 1_000, heartbeatInterval: interval)
    }

    @Test func theClaimTakesTheOldestUnheldQueuedBuildOfTheSchemesAskedForByIdOrName() throws {
        let store = try Store.inMemory()
        let app = try seedProject(store, scheme: "App")
        let release = try seedProject(store, id: "com.example.other", scheme: "Release")
        let (newer, older, releaseBuild) = try store.client.write { db in
            (try store.builds.create(db, scheme: app.id, version: "2.0.0", at: Date(timeIntervalSince1970: 2_000)),
             try store.builds.create(db, scheme: app.id, version: "1.0.0", at: Date(timeIntervalSince1970: 1_000)),
             try store.builds.create(db, scheme: release.id, version: "1.0.0", at: Date(timeIntervalSince1970: 500)))
        }
        func claim(_ holder: BuildHolder, _ schemes: [String]?) throws -> String? {
            try store.client.write { db in try store.builds.reserveNext(db, for: holder, schemes: schemes)?.id }
        }
        // By name: only that scheme's builds, oldest first.
        #expect(try claim(Self.holder("a"), ["App"]) == older.id)
        #expect(try claim(Self.holder("b"), ["App"]) == newer.id)
        #expect(try claim(Self.holder("c"), ["App"]) == nil)
        #expect(try store.client.read { db in try store.builds.hasClaimable(db, schemes: ["App"]) } == false)
        #expect(try store.client.read { db in try store.builds.hasClaimable(db, schemes: nil) } == true)
        // By id; a name no scheme has claims nothing.
        #expect(try claim(Self.holder("d"), ["Nope"]) == nil)
        #expect(try claim(Self.holder("d"), [release.id]) == releaseBuild.id)
        let lease = try #require(try store.client.read { db in try store.builds.lease(db, older.id) })
        #expect(lease.status == .queued && lease.runnerId == "a" && lease.runnerHost == "ci-1" && lease.heartbeatInterval == 10)
        #expect(lease.attempts == 0)
    }

    @Test func aLiveHolderKeepsItsBuildALapsedOneLosesItAndOnlyTheHolderClaimsAndFinishesIt() throws {
        let store = try Store.inMemory()
        let scheme = try seedProject(store)
        let build = try store.client.write { db in try store.builds.create(db, scheme: scheme.id, version: "1.0.0") }
        let now = Date()
        #expect(try store.client.write { db in try store.builds.reserve(db, build.id, for: Self.holder("a"), at: now) })
        // Held and alive: nobody else reserves or claims it.
        #expect(try !store.client.write { db in try store.builds.reserve(db, build.id, for: Self.holder("b"), at: now.addingTimeInterval(29)) })
        #expect(try !store.client.write { db in try store.builds.claim(db, build.id, for: Self.holder("b"), at: now) })
        // Three intervals without a heartbeat: free again.
        #expect(try store.client.write { db in try store.builds.reserve(db, build.id, for: Self.holder("b"), at: now.addingTimeInterval(31)) })
        #expect(try !store.client.write { db in try store.builds.claim(db, build.id, for: Self.holder("a"), at: now) })
        #expect(try store.client.write { db in try store.builds.claim(db, build.id, for: Self.holder("b"), at: now.addingTimeInterval(31)) })
        let running = try #require(try store.client.read { db in try store.builds.lease(db, build.id) })
        #expect(running.status == .running && running.runnerId == "b" && running.attempts == 1)

        // The heartbeat returns what the holder still holds.
        #expect(try store.client.write { db in try store.builds.heartbeat(db, for: Self.holder("b")) } == [build.id])
        #expect(try store.client.write { db in try store.builds.heartbeat(db, for: Self.holder("a")) } == [])
        // Only its holder, under the attempt it claimed, records its end.
        let queue = SQLiteBuildStore(store: store)
        for fence in [BuildFence(runnerId: "a", attempt: 1), BuildFence(runnerId: "b", attempt: 0)] {
            #expect(throws: BuildLeaseLost.self) {
                try queue.finish(build.id, status: .succeeded, exitCode: 0, progress: nil, fence: fence, log: nil, crash: nil)
            }
        }
        #expect(try queue.finish(build.id, status: .succeeded, exitCode: 0, progress: nil, fence: BuildFence(runnerId: "b", attempt: 1),
                                 log: nil, crash: nil))
    }

    @Test func aTakeBackHappensOnlyUnderTheLeaseItReadOnce() throws {
        let store = try Store.inMemory()
        let scheme = try seedProject(store)
        let build = try store.client.write { db in try store.builds.create(db, scheme: scheme.id, version: "1.0.0") }
        let started = Date(timeIntervalSince1970: 10_000)
        try store.client.write { db in
            _ = try store.builds.reserve(db, build.id, for: Self.holder("a", interval: 1), at: started)
            _ = try store.builds.claim(db, build.id, for: Self.holder("a", interval: 1), at: started)
        }
        // Not expired within three intervals; expired after.
        #expect(try store.client.read { db in try store.builds.expiredLeases(db, at: started.addingTimeInterval(2.9)) }.isEmpty)
        let expired = try store.client.read { db in try store.builds.expiredLeases(db, at: started.addingTimeInterval(3.1)) }
        let lease = try #require(expired.first)
        #expect(expired.count == 1 && lease.buildId == build.id && lease.heartbeatLapsed(at: started.addingTimeInterval(3.1)))

        // The holder heartbeats again after it was read: the take-back changes nothing.
        _ = try store.client.write { db in try store.builds.heartbeat(db, for: Self.holder("a", interval: 1), at: started.addingTimeInterval(3.2)) }
        #expect(try !store.client.write { db in try store.builds.takeBack(db, lease, .requeue, note: "stale") })
        let fresh = try #require(try store.client.read { db in try store.builds.lease(db, build.id) })
        #expect(try store.client.write { db in try store.builds.takeBack(db, fresh, .requeue, note: "requeued: stale") })
        #expect(try !store.client.write { db in try store.builds.takeBack(db, fresh, .fail, note: "again") })
        let requeued = try #require(try store.client.read { db in try store.builds.lease(db, build.id) })
        #expect(requeued.status == .queued && requeued.runnerId == nil && requeued.heartbeatAt == nil && requeued.attempts == 1)
        let logs = try store.client.read { db in try String.fetchAll(db, sql: "SELECT level || ' ' || category || ' ' || content FROM buildLogs") }
        #expect(logs == ["warning runner requeued: stale"])
    }

    @Test func aDatabaseWithoutMigration004HoldsBuildsAsBefore() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        let scheme = try seedProject(store)
        try store.client.write { db in
            try db.execute(sql: """
                DROP INDEX builds_on_status_created; DROP INDEX builds_on_runner;
                ALTER TABLE builds DROP COLUMN runnerId; ALTER TABLE builds DROP COLUMN heartbeatAt;
                ALTER TABLE builds DROP COLUMN heartbeatInterval; ALTER TABLE builds DROP COLUMN attempts;
                """)
        }
        let build = try store.client.write { db in try store.builds.create(db, scheme: scheme.id, version: "1.0.0") }
        try store.client.write { db throws in
            #expect(try !store.builds.queueColumnsExist(db))
            #expect(try store.builds.reserveNext(db, for: Self.holder("a"), schemes: nil) == nil)
            #expect(try store.builds.reserve(db, build.id, for: Self.holder("a")))
            #expect(try store.builds.claim(db, build.id, for: Self.holder("a")))
            #expect(try store.builds.heartbeat(db, for: Self.holder("a")) == nil)
            #expect(try store.builds.expiredLeases(db).isEmpty)
            #expect(try store.builds.finish(db, build.id, status: .succeeded))
        }
        let ended = try store.client.read { db in try store.builds.records.require(db, build.id) }
        #expect(ended.status == .succeeded && ended.runnerPid == 100 && ended.runnerHost == "ci-1")
    }
}
