import Foundation
import Synchronization
import Testing
@testable import Store
#if SQLiteNIO
import StoreSQLiteNIO
#endif

/// The storage witness's implementations in this build: GRDB always;
/// vapor/sqlite-nio with the package trait (`./scripts/test-sqlite-nio`,
/// which `.ci/run` runs). Every test below runs once per engine, on a
/// real file that opsh's migrations made.
enum WitnessEngine: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case grdb
    #if SQLiteNIO
    case sqliteNIO
    #endif

    var testDescription: String { rawValue }

    /// The engine's client on the store's file; GRDB's polls for other
    /// processes' commits as the store was told, sqlite-nio's every `poll`.
    func client(_ store: Store, poll: TimeInterval = 0.02) throws -> RepositoryClient {
        switch self {
        case .grdb: return .grdb(store)
        #if SQLiteNIO
        case .sqliteNIO: return try .sqliteNIO(path: store.path!, externalChangePollInterval: poll)
        #endif
        }
    }
}

@Suite struct StorageWitnessTests {
    /// A migrated store on a new file, and the engine's client on it.
    private func open(_ engine: WitnessEngine, _ directory: TemporaryDirectory, name: String = "opsh.sqlite")
        throws -> (Store, RepositoryClient) {
        let store = try makeStore(in: directory, name: name)
        return (store, try engine.client(store))
    }

    private func addProject(_ client: RepositoryClient, _ store: Store, id: String = "com.example.app") throws -> String {
        try client.write { db in
            let projects = RecordTable(store.projects.records)
            _ = try projects.insert(db, ["bundleIdentifier": .text(id), "name": .text("App"), "displayName": .text("App"),
                                                   "gitRepositoryURL": .text("/srv/app")],
                                    spec: projects.spec(db))
            var schemes = RecordTable(store.schemes.records)
            schemes.generatedKey = true
            return try schemes.insert(db, ["projectBundleIdentifier": .text(id), "name": .text("App"), "buildCommand": .text("make")],
                                      spec: schemes.spec(db)).textValue!
        }
    }

    @Test(arguments: WitnessEngine.allCases)
    func recordTableWritesWhatTheOtherEngineReads(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(engine, directory)
        let scheme = try addProject(client, store)

        // Update and upsert through the engine under test …
        try client.write { db in
            let projects = RecordTable(store.projects.records)
            let spec = try projects.spec(db)
            try projects.update(db, key: .text("com.example.app"), fields: ["name": .text("Ünïcode ✓")], spec: spec)
            _ = try projects.upsert(db, ["bundleIdentifier": .text("com.example.other"), "name": .text("Other"),
                                         "displayName": .text("Other"), "gitRepositoryURL": .text("/srv/other")], spec: spec)
        }
        // … read back by GRDB's records from the same file.
        let names = try store.client.read { db in try store.projects.records.list(db).map(\.name) }
        #expect(names.sorted() == ["Other", "Ünïcode ✓"])
        let stored = try store.client.read { db in try store.schemes.records.get(db, scheme) }
        #expect(stored?.buildCommand == "make")

        // A reference to a missing row is refused with the row named, and
        // nothing of that transaction stays.
        #expect(throws: StoreError.refused(reason: "no row in projects with key nowhere (schemes.projectBundleIdentifier refers to it)")) {
            try client.write { db in
                var schemes = RecordTable(store.schemes.records)
                schemes.generatedKey = true
                try schemes.update(db, key: .text(scheme), fields: ["buildCommand": .text("changed")], spec: schemes.spec(db))
                _ = try schemes.insert(db, ["projectBundleIdentifier": .text("nowhere"), "name": .text("X"),
                                            "buildCommand": .text("make")], spec: schemes.spec(db))
            }
        }
        #expect(try store.client.read { db in try store.schemes.records.get(db, scheme)?.buildCommand } == "make")
    }

    @Test(arguments: WitnessEngine.allCases)
    func buildNumbersAndCascadesFollowTheRepositoriesRules(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(engine, directory)
        let scheme = try addProject(client, store)
        let numbers = try client.write { db -> [Int] in
            let first = try store.builds.create(db, scheme: scheme, version: "1.0")
            let second = try store.builds.create(db, scheme: scheme, version: "1.0")
            return try [first, second].map { id in
                Int(try db.value("SELECT buildNumber FROM builds WHERE id = ?", [.text(id)])!.integerValue!)
            }
        }
        #expect(numbers == [1, 2])

        // Without cascade a project with schemes is refused, and stays.
        #expect(throws: (any Error).self) {
            try client.write { db in try store.projects.delete(db, "com.example.app") }
        }
        #expect(try client.read { db in try db.value("SELECT count(*) FROM builds") } == .integer(2))
        // With cascade its schemes and builds go with it.
        let deleted = try client.write { db in try store.projects.delete(db, "com.example.app", cascade: true) }
        #expect(deleted)
        let left = try client.read { db in
            try ["projects", "schemes", "builds"].map { try db.value("SELECT count(*) FROM \($0)") }
        }
        #expect(left == [.integer(0), .integer(0), .integer(0)])
    }

    @Test(arguments: WitnessEngine.allCases)
    func usageAndAnalyticsAgreeWithTheOtherEngine(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(engine, directory)
        let day = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01 UTC
        try client.write { db in
            let models = RecordTable(store.models.records)
            _ = try models.insert(db, ["id": .text("m1"), "name": .text("M1"), "format": .text("gguf"), "framework": .text("llama")], spec: models.spec(db))
            try store.models.recordUsage(db, model: "m1", at: day, tokens: 100, cost: 0.25, latencyMs: 40)
            try store.models.recordUsage(db, model: "m1", at: day, tokens: 50, cost: 0.5, latencyMs: 20, failed: true)
        }
        let grdb = try RepositoryClient.grdb(store).read { db in try Analytics.usage(db) }
        let engines = try client.read { db in try Analytics.usage(db) }
        #expect(engines == grdb)
        #expect(engines.rows.count == 1)
        // An empty period still has the report's columns.
        let empty = try client.read { db in try Analytics.usage(db, period: .init(since: 0, until: 1)) }
        #expect(empty.rows.isEmpty)
        #expect(empty.columns == grdb.columns)
        // A model that does not exist is named.
        #expect(throws: StoreError.notFound(table: "model_metadata", key: "nope")) {
            try client.write { db in try store.models.recordUsage(db, model: "nope", tokens: 1, cost: 0, latencyMs: 0) }
        }
    }

    @Test(arguments: WitnessEngine.allCases)
    func anExportImportsIntoAnotherFileAndExportsTheSameDocument(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(engine, directory)
        let scheme = try addProject(client, store)
        try client.write { db in
            let build = try store.builds.create(db, scheme: scheme, version: "2.0")
            try db.execute("INSERT INTO buildLogs (id, buildId, createdAt, level, category, content) VALUES (?, ?, ?, 'info', 'compiler', ?)",
                           [.text("log-1"), .text(build), .real(1_767_225_600.123456), .text("ok ✓")])
        }
        let exported = try client.read { db in try Transfer.exportProject(db, "com.example.app") }
        #expect(exported.summary.rows("builds") == 1)
        #expect(exported.summary.rows("buildLogs") == 1)

        let (other, otherClient) = try open(engine, directory, name: "other.sqlite")
        try otherClient.write { db in try Transfer.importDocument(db, exported.text) }
        let again = try otherClient.read { db in try Transfer.exportProject(db, "com.example.app") }
        #expect(again.text == exported.text)
        // And GRDB's export of the imported file agrees byte for byte.
        #expect(try RepositoryClient.grdb(other).read { db in try Transfer.exportProject(db, "com.example.app") }.text == exported.text)
    }

    @Test(arguments: WitnessEngine.allCases)
    func valuesCrossBetweenEnginesUnchanged(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(engine, directory)
        let values: [StoreValue] = [.integer(Int64.max), .integer(Int64.min), .real(0.1), .text("ünï ✓ \u{1F600}"),
                                    .text(""), .blob([0, 255, 1, 0]), .null]
        try client.write { db in
            try db.execute("CREATE TABLE scratch (n INTEGER PRIMARY KEY, v)", [])
            for (index, value) in values.enumerated() {
                try db.execute("INSERT INTO scratch (n, v) VALUES (?, ?)", [.integer(Int64(index)), value])
            }
        }
        // GRDB reads what the engine wrote, and the engine reads it back.
        let byGRDB = try RepositoryClient.grdb(store).read { db in try db.fetch("SELECT v FROM scratch ORDER BY n", []).rows.map { $0[0] } }
        let byEngine = try client.read { db in try db.fetch("SELECT v FROM scratch ORDER BY n", []).rows.map { $0[0] } }
        #expect(byGRDB == values)
        #expect(byEngine == values)
        #expect(try client.write { db in try db.execute("UPDATE scratch SET v = NULL WHERE n < 3", []) } == 3)
    }

    @Test(arguments: WitnessEngine.allCases)
    func aReadCannotWriteAndAFailedWriteLeavesNothing(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(engine, directory)
        _ = try addProject(client, store)
        let rename = "UPDATE projects SET name = 'renamed'"

        // A read transaction is kept from writing by SQLite itself …
        let refusal = #expect(throws: (any Error).self) {
            try client.read { db in try db.execute(rename, []) }
        }
        #expect("\(refusal!)".contains("readonly") || "\(refusal!)".contains("read-only") || "\(refusal!)".contains("query_only"))
        #expect(try client.read { db in try db.value("SELECT name FROM projects") } == .text("App"))
        // … the same statement in a write transaction works (the control) …
        #expect(try client.write { db in try db.execute(rename, []) } == 1)
        // … and a write that throws part-way is rolled back whole.
        struct Stop: Error {}
        #expect(throws: Stop.self) {
            try client.write { db in
                try db.execute("UPDATE projects SET name = 'half'", [])
                throw Stop()
            }
        }
        #expect(try client.read { db in try db.value("SELECT name FROM projects") } == .text("renamed"))
    }

    @Test(arguments: WitnessEngine.allCases)
    func observationSeesThisEnginesAndAnotherProcesssCommits(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(engine, directory)
        let values = Collector<StoreValue>()
        let observation = try QueryObservation(client: client, key: .allProjectIds) { result in
            if case .success(let value) = result { values.append(value) }
        }
        #expect(values.wait { $0 == [.array([])] })
        _ = try addProject(client, store, id: "a.b")
        #expect(values.wait { $0.last == .array([.text("a.b")]) })
        // The sqlite3 CLI is another process writing to the same file.
        _ = try sqlite3CLI(directory.file("opsh.sqlite"),
                           "INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('c.d', 'C', 'C', '/c', 1)")
        #expect(values.wait { $0.last == .array([.text("a.b"), .text("c.d")]) })
        observation.cancel()
        // Cancelled: later commits deliver nothing. A live observation of
        // the same key is the barrier: once it has the commit, the
        // cancelled one would have had it too.
        let count = values.all.count
        let control = Collector<StoreValue>()
        let live = try QueryObservation(client: client, key: .allProjectIds) { result in
            if case .success(let value) = result { control.append(value) }
        }
        #expect(control.wait { !$0.isEmpty })
        _ = try addProject(client, store, id: "e.f")
        #expect(control.wait { $0.last == .array([.text("a.b"), .text("c.d"), .text("e.f")]) })
        live.cancel()
        #expect(values.all.count == count)
    }

    /// The engine's own commits are seen at once, not at the next poll
    /// for other processes' (here an hour away): GRDB's observation, and
    /// sqlite-nio's update hook.
    @Test(arguments: WitnessEngine.allCases)
    func ownCommitsAreObservedWithoutWaitingForThePoll(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let store = try Store.open(path: directory.file("opsh.sqlite"), options: StoreOptions(externalChangePollInterval: 3600))
        let client = try engine.client(store, poll: 3600)
        let values = Collector<StoreValue>()
        let observation = try QueryObservation(client: client, key: .allProjectIds) { result in
            if case .success(let value) = result { values.append(value) }
        }
        #expect(values.wait { $0 == [.array([])] })
        _ = try addProject(client, store, id: "a.b")
        #expect(values.wait(timeout: 3) { $0.last == .array([.text("a.b")]) })
        observation.cancel()
    }

    /// sqlite-nio's own busy handler retries for ever; opsh's engines wait
    /// for another writer's lock a bounded time, and then say so.
    @Test(arguments: WitnessEngine.allCases)
    func aWriteBehindAnotherWritersLockGivesUpAndThenSucceeds(engine: WitnessEngine) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("opsh.sqlite")
        let store = try Store.open(path: path, options: StoreOptions(busyTimeout: 0.3, externalChangePollInterval: 0.02))
        let client: RepositoryClient
        switch engine {
        case .grdb: client = .grdb(store)
        #if SQLiteNIO
        case .sqliteNIO: client = .sqliteNIO(try SQLiteNIODatabase(path: path, busyTimeout: 0.3))
        #endif
        }
        // Another process holds the write lock for three seconds (it says
        // "locked" once it has it).
        let holder = try ChildProcess.start(
            "/usr/bin/sqlite3",
            [path, "BEGIN IMMEDIATE; INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('held', 'H', 'H', '/h', 1);",
             // Through the shell: the CLI's own output waits in its buffer.
             ".shell echo locked", ".shell sleep 3", "COMMIT;"],
            environment: ProcessInfo.processInfo.environment)
        let locked = readFirstLine(holder.standardOutput)
        #expect(String(decoding: locked, as: UTF8.self) == "locked\n")
        let started = Date()
        let refusal = #expect(throws: (any Error).self) {
            try client.write { db in try db.execute("UPDATE projects SET name = 'x'", []) }
        }
        #expect("\(refusal!)".contains("locked"))
        #expect(Date().timeIntervalSince(started) < 1.5)
        _ = holder.finish(stdoutPrefix: locked)
        // The lock released, the same write goes through.
        #expect(try client.write { db in try db.execute("UPDATE projects SET name = 'x'", []) } == 1)
    }
}
