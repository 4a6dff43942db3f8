import Foundation
import GRDB
import Testing
@testable import Store

@Suite struct ObservationTests {
    @Test func inProcessWritesAreObservedAndUnchangedValuesAreNot() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        let values = Collector<StoreValue>()
        let observation = try QueryObservation(client: store.client, key: .allProjectIds) { result in
            if case .success(let value) = result { values.append(value) }
        }
        #expect(values.wait { $0 == [.array([])] })

        _ = try store.client.write { db in
            try store.projects.records.insert(db, ProjectRecord(bundleIdentifier: "a.b", name: "A", gitRepositoryURL: "/a"))
        }
        #expect(values.wait { $0.last == .array([.text("a.b")]) })

        // A write that does not change the value (another table, or the
        // same value) delivers nothing.
        try store.client.write { db in
            try db.execute(sql: "UPDATE projects SET name = 'A2'")
            try store.telemetry.insertBatch(db, [.init(event: "noise")])
        }
        // Then one that does: once its value is delivered, the one before
        // had its turn (deliveries are in commit order), and delivered nothing.
        _ = try store.client.write { db in
            try store.projects.records.insert(db, ProjectRecord(bundleIdentifier: "c.d", name: "C", gitRepositoryURL: "/c"))
        }
        #expect(values.wait { $0.last == .array([.text("a.b"), .text("c.d")]) })
        #expect(values.all.count == 3, "\(values.all)")
        observation.cancel()
    }

    @Test func anotherProcessCommitIsObserved() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try seedProject(store)
        let scheme = try store.client.read { db in try store.schemes.records.list(db).first! }
        let values = Collector<StoreValue>()
        let observation = try QueryObservation(client: store.client, key: .schemeBuildIds([scheme.id], version: nil)) { result in
            if case .success(let value) = result { values.append(value) }
        }
        #expect(values.wait { $0.count == 1 })
        // The sqlite3 CLI is a separate process writing to the same file.
        try sqlite3CLI(directory.file("opsh.sqlite"), """
            PRAGMA foreign_keys = ON;
            INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('from-cli', '\(scheme.id)', '9.9.9', 1, 5);
            """)
        #expect(values.wait { $0.last == .array([.text("from-cli")]) })
        observation.cancel()
    }

    @Test func cancelledObservationsStopAndLeakNothing() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        let values = Collector<StoreValue>()
        var observations: [QueryObservation] = []
        for _ in 0..<5 {
            observations.append(try QueryObservation(client: store.client, key: .telemetryCounts) { result in
                if case .success(let value) = result { values.append(value) }
            })
        }
        #expect(values.wait { $0.count == 5 })
        #expect(store.externalChanges?.subscriberCount == 5)
        for observation in observations { observation.cancel() }
        #expect(store.externalChanges?.subscriberCount == 0)
        // A live observation of the same key is the barrier: once it has
        // both commits, the cancelled ones would have had them too.
        let control = Collector<StoreValue>()
        let live = try QueryObservation(client: store.client, key: .telemetryCounts) { result in
            if case .success(let value) = result { control.append(value) }
        }
        #expect(control.wait { !$0.isEmpty })
        try sqlite3CLI(directory.file("opsh.sqlite"), "INSERT INTO telemetry (event, created_at) VALUES ('x', 1)")
        try store.client.write { db in try store.telemetry.insertBatch(db, [.init(event: "y")]) }
        #expect(control.wait { $0.last?["x"] == .integer(1) && $0.last?["y"] == .integer(1) }, "\(control.all)")
        live.cancel()
        #expect(values.all.count == 5)

        // Dropping the last reference cancels too.
        weak var weakObservation: QueryObservation?
        do {
            let observation = try QueryObservation(client: store.client, key: .telemetryCounts) { _ in }
            weakObservation = observation
            #expect(store.externalChanges?.subscriberCount == 1)
        }
        // A fetch already running holds it until it returns.
        let deadline = Date().addingTimeInterval(5)
        while weakObservation != nil, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(weakObservation == nil)
        #expect(store.externalChanges?.subscriberCount == 0)
    }

    @Test func burstsOfChangesCoalesceButTheLastValueArrives() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        let values = Collector<StoreValue>()
        let observation = try QueryObservation(client: store.client, key: .telemetryCounts) { result in
            if case .success(let value) = result { values.append(value) }
        }
        for _ in 0..<200 {
            try store.client.write { db in try store.telemetry.insertBatch(db, [.init(event: "tick")]) }
        }
        #expect(values.wait { $0.last == .object([.init("tick", .integer(200))]) })
        observation.cancel()
    }
}

@Suite struct MaintenanceTests {
    @Test func backupReportsProgressAndMakesAVerifiedOwnerOnlyCopy() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try store.client.write { db in
            try store.telemetry.insertBatch(db, (0..<20_000).map { .init(event: "e\($0 % 7)", properties: "{\"i\":\($0)}") })
        }
        var steps: [MaintenanceProgress] = []
        let destination = directory.file("backups/copy.sqlite")
        try store.backup(to: destination, pagesPerStep: 50) { steps.append($0) }
        #expect(steps.count > 2)
        #expect(steps.last?.fraction == 1)
        let attributes = try FileManager.default.attributesOfItem(atPath: destination)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        #expect(try sqlite3CLI(destination, "PRAGMA integrity_check; SELECT count(*) FROM telemetry;") == "ok\n20000")
        #expect(throws: StoreError.self) { try store.backup(to: destination) }
    }

    @Test func checkListsForeignKeyViolations() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("opsh.sqlite")
        try makeStore(in: directory).writer.close()
        // A writer that lived without foreign keys left an orphan.
        try sqlite3CLI(path, "PRAGMA foreign_keys = OFF; INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES ('orphan', 'gone', 'x', 0);")
        let store = try makeStore(in: directory)
        let report = try store.check()
        #expect(report.integrityProblems.isEmpty)
        #expect(report.foreignKeyViolations.map(\.description) == ["buildLogs row 1 refers to a missing row of builds"])
        #expect(!report.isOK)
    }

    @Test func statisticsCountRowsAndPages() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try store.client.write { db in try store.telemetry.insertBatch(db, (0..<1000).map { _ in .init(event: "e") }) }
        try store.client.write { db in try db.execute(sql: "DELETE FROM telemetry WHERE id <= 900") }
        let stats = try store.statistics()
        #expect(stats.rowCounts.first { $0.table == "telemetry" }?.rows == 100)
        #expect(stats.pageCount > 0)
        #expect(stats.walSize > 0)
        try store.vacuum()
        #expect(try store.statistics().freePageCount == 0)
    }
}
