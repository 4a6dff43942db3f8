import Foundation
import GRDB
import Synchronization
import Testing
@testable import Store

/// The rules written once over ``RepositoryConnection`` (records,
/// numbering and cascades, analytics, transfer, raw values) on SQLite
/// through the store's GRDB client: what one transaction writes, GRDB's
/// records and another read see; a read cannot write; observation sees
/// this process's and another's commits; a write behind another writer's
/// lock gives up in bounded time. On a real file that opsh's migrations
/// made. (PostgreSQL's side of the same rules runs in the engine-
/// parameterized tests; ARCHITECTURE.md, "The engine seam".)
@Suite struct RepositoryConnectionTests {
    /// The store's client, each body given the transaction's connection.
    struct Client {
        let store: Store
        func read<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T {
            try store.client.read { db in try body(StoreDatabase(db)) }
        }
        func write<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T {
            try store.client.write { db in try body(StoreDatabase(db)) }
        }
    }

    /// A migrated store on a new file, and its client.
    private func open(_ directory: TemporaryDirectory, name: String = "opsh.sqlite") throws -> (Store, Client) {
        let store = try makeStore(in: directory, name: name)
        return (store, Client(store: store))
    }

    private func addProject(_ client: Client, _ store: Store, id: String = "com.example.app") throws -> String {
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

    @Test
    func recordTableWritesWhatGRDBsRecordsRead() throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(directory)
        let scheme = try addProject(client, store)

        // Update and upsert through the connection …
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

    @Test
    func buildNumbersAndCascadesFollowTheRepositoriesRules() throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(directory)
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

    @Test
    func usageReportsTheDayAndNamesAMissingModel() throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(directory)
        let day = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01 UTC
        try client.write { db in
            let models = RecordTable(store.models.records)
            _ = try models.insert(db, ["id": .text("m1"), "name": .text("M1"), "format": .text("gguf"), "framework": .text("llama")], spec: models.spec(db))
            try store.models.recordUsage(db, model: "m1", at: day, tokens: 100, cost: 0.25, latencyMs: 40)
            try store.models.recordUsage(db, model: "m1", at: day, tokens: 50, cost: 0.5, latencyMs: 20, failed: true)
        }
        let usage = try client.read { db in try Analytics.usage(db) }
        #expect(usage.rows.count == 1)
        // An empty period still has the report's columns.
        let empty = try client.read { db in try Analytics.usage(db, period: .init(since: 0, until: 1)) }
        #expect(empty.rows.isEmpty)
        #expect(empty.columns == usage.columns)
        // A model that does not exist is named.
        #expect(throws: StoreError.notFound(table: "model_metadata", key: "nope")) {
            try client.write { db in try store.models.recordUsage(db, model: "nope", tokens: 1, cost: 0, latencyMs: 0) }
        }
    }

    @Test
    func anExportImportsIntoAnotherFileAndExportsTheSameDocument() throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(directory)
        let scheme = try addProject(client, store)
        try client.write { db in
            let build = try store.builds.create(db, scheme: scheme, version: "2.0")
            try db.execute("INSERT INTO buildLogs (id, buildId, createdAt, level, category, content) VALUES (?, ?, ?, 'info', 'compiler', ?)",
                           [.text("log-1"), .text(build), .real(1_767_225_600.123456), .text("ok ✓")])
        }
        let exported = try client.read { db in try Transfer.exportProject(db, "com.example.app") }
        #expect(exported.summary.rows("builds") == 1)
        #expect(exported.summary.rows("buildLogs") == 1)

        let (_, otherClient) = try open(directory, name: "other.sqlite")
        try otherClient.write { db in try Transfer.importDocument(db, exported.text) }
        let again = try otherClient.read { db in try Transfer.exportProject(db, "com.example.app") }
        #expect(again.text == exported.text)
    }

    @Test
    func valuesComeBackUnchanged() throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(directory)
        let values: [StoreValue] = [.integer(Int64.max), .integer(Int64.min), .real(0.1), .text("ünï ✓ \u{1F600}"),
                                    .text(""), .blob([0, 255, 1, 0]), .null]
        try client.write { db in
            try db.execute("CREATE TABLE scratch (n INTEGER PRIMARY KEY, v)", [])
            for (index, value) in values.enumerated() {
                try db.execute("INSERT INTO scratch (n, v) VALUES (?, ?)", [.integer(Int64(index)), value])
            }
        }
        // GRDB's own values and the connection's read what was written.
        let byGRDB = try store.client.read { db in try DatabaseValue.fetchAll(db, sql: "SELECT v FROM scratch ORDER BY n") }
        #expect(byGRDB.map { StoreValue($0) } == values)
        #expect(try client.read { db in try db.fetch("SELECT v FROM scratch ORDER BY n", []).rows.map { $0[0] } } == values)
        #expect(try client.write { db in try db.execute("UPDATE scratch SET v = NULL WHERE n < 3", []) } == 3)
    }

    @Test
    func aReadCannotWriteAndAFailedWriteLeavesNothing() throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(directory)
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

    @Test
    func observationSeesThisProcesssAndAnotherProcesssCommits() throws {
        let directory = TemporaryDirectory()
        let (store, client) = try open(directory)
        let values = Collector<StoreValue>()
        let observation = try QueryObservation(client: store.client, key: .allProjectIds) { result in
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
        let live = try QueryObservation(client: store.client, key: .allProjectIds) { result in
            if case .success(let value) = result { control.append(value) }
        }
        #expect(control.wait { !$0.isEmpty })
        _ = try addProject(client, store, id: "e.f")
        #expect(control.wait { $0.last == .array([.text("a.b"), .text("c.d"), .text("e.f")]) })
        live.cancel()
        #expect(values.all.count == count)
    }

    /// This process's own commits are seen at once (GRDB's observation),
    /// not at the next poll for other processes' (here an hour away).
    @Test
    func ownCommitsAreObservedWithoutWaitingForThePoll() throws {
        let directory = TemporaryDirectory()
        let store = try Store.open(path: directory.file("opsh.sqlite"), options: StoreOptions(externalChangePollInterval: 3600))
        let client = Client(store: store)
        let values = Collector<StoreValue>()
        let observation = try QueryObservation(client: store.client, key: .allProjectIds) { result in
            if case .success(let value) = result { values.append(value) }
        }
        #expect(values.wait { $0 == [.array([])] })
        _ = try addProject(client, store, id: "a.b")
        #expect(values.wait(timeout: 3) { $0.last == .array([.text("a.b")]) })
        observation.cancel()
    }

    /// A write waits for another writer's lock a bounded time (the busy
    /// timeout), and then says so.
    @Test
    func aWriteBehindAnotherWritersLockGivesUpAndThenSucceeds() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("opsh.sqlite")
        let store = try Store.open(path: path, options: StoreOptions(busyTimeout: 0.3, externalChangePollInterval: 0.02))
        let client = Client(store: store)
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
