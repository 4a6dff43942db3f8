import Foundation
import GRDB
import Testing
@testable import Store

@Suite struct DatabaseLocationTests {
    @Test func explicitPathWinsOverEnvironment() {
        let path = DatabaseLocation.resolve(explicitPath: "/tmp/a.sqlite", environment: ["OPSH_DB": "/tmp/b.sqlite", "HOME": "/home/op"])
        #expect(path == "/tmp/a.sqlite")
    }

    @Test func environmentVariableComesNext() {
        let path = DatabaseLocation.resolve(environment: ["OPSH_DB": "/tmp/b.sqlite", "XDG_DATA_HOME": "/xdg", "HOME": "/home/op"])
        #expect(path == "/tmp/b.sqlite")
    }

    @Test func xdgDataHomeThenHomeFallback() {
        #expect(DatabaseLocation.resolve(environment: ["XDG_DATA_HOME": "/xdg", "HOME": "/home/op"]) == "/xdg/opsh/opsh.sqlite")
        #expect(DatabaseLocation.resolve(environment: ["HOME": "/home/op"]) == "/home/op/.local/share/opsh/opsh.sqlite")
        // XDG ignores relative values.
        #expect(DatabaseLocation.resolve(environment: ["XDG_DATA_HOME": "relative", "HOME": "/home/op"]) == "/home/op/.local/share/opsh/opsh.sqlite")
        #expect(DatabaseLocation.resolve(explicitPath: "~/db.sqlite", environment: ["HOME": "/home/op"]) == "/home/op/db.sqlite")
    }
}

@Suite struct OpeningTests {
    @Test func firstOpenCreatesFolderAndMigrates() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("nested/deeper/opsh.sqlite")
        let store = try Store.open(path: path)
        #expect(FileManager.default.fileExists(atPath: path))
        let stats = try store.statistics()
        #expect(stats.migrations == ["001_initialSchema", "002_indexes", "003_audit", "004_runners", "005_auditChain", "006_schemeEnvironment", "007_runnerRegistry", "008_pinnedFunctions"])
        #expect(stats.rowCounts.map(\.table).contains("telemetry"))
    }

    @Test func poolUsesWALAndForeignKeys() throws {
        let directory = TemporaryDirectory()
        let store = try Store.open(path: directory.file("db.sqlite"))
        let (mode, foreignKeys) = try store.client.write { db in
            (try String.fetchOne(db, sql: "PRAGMA journal_mode"),
             try Bool.fetchOne(db, sql: "PRAGMA foreign_keys"))
        }
        #expect(mode == "wal")
        #expect(foreignKeys == true)
    }

    @Test func notADatabaseIsRefusedUntouched() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("notes.txt")
        let content = Data(String(repeating: "operator notes, not a database\n", count: 200).utf8)
        _ = FileManager.default.createFile(atPath: path, contents: content)
        #expect(throws: StoreError.notADatabase(path: path)) { try Store.open(path: path) }
        #expect(fileBytes(path) == content)
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
    }

    @Test func truncatedDatabaseIsRefusedUntouched() throws {
        let directory = TemporaryDirectory()
        let source = directory.file("full.sqlite")
        // A rollback-journal database, as another tool would leave it.
        try sqlite3CLI(source, "CREATE TABLE t(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000) INSERT INTO t SELECT randomblob(200) FROM n;")
        let full = fileBytes(source)
        let path = directory.file("truncated.sqlite")
        let truncated = full.prefix(full.count / 2)
        _ = FileManager.default.createFile(atPath: path, contents: truncated)
        do {
            _ = try Store.open(path: path)
            Issue.record("a truncated database opened")
        } catch let error as StoreError {
            guard case .corrupt(_, let detail) = error else { Issue.record("unexpected \(error)"); return }
            #expect(detail.contains("truncated"))
        }
        #expect(fileBytes(path) == truncated)
    }

    @Test func newerDatabaseIsRefusedUntouched() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("newer.sqlite")
        try Store.open(path: path).writer.close()
        try sqlite3CLI(path, "INSERT INTO grdb_migrations (identifier) VALUES ('003_fromTheFuture');")
        let before = fileBytes(path)
        #expect(throws: StoreError.newerSchema(path: path, unknownMigrations: ["003_fromTheFuture"])) {
            try Store.open(path: path)
        }
        #expect(fileBytes(path) == before)
    }

    /// `Store.prepare` (the batch modes) connects on first use: until then
    /// the file is not even switched to WAL; a newer database is refused
    /// at that first use, untouched, and each later use refuses it again.
    @Test func preparedStoreConnectsOnFirstUseAndStillRefusesANewerDatabase() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("lazy.sqlite")
        try sqlite3CLI(path, "CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        #expect(try sqlite3CLI(path, "PRAGMA journal_mode") == "delete")

        let store = try Store.prepare(path: path)
        #expect(!store.isConnected)
        #expect(try sqlite3CLI(path, "PRAGMA journal_mode") == "delete")
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
        // First use: a database with tables of its own is not made opsh's
        // implicitly: connected (in WAL), its migrations reported pending.
        let rows = try store.client.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM t") }
        #expect(rows == 1)
        #expect(store.isConnected)
        #expect(store.pendingMigrations == StoreMigrations.builtInIdentifiers)
        #expect(try sqlite3CLI(path, "PRAGMA journal_mode") == "wal")
        // Asked for, the migrations are applied (the table kept).
        try store.migratePending()
        let projects = try store.client.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM projects") }
        #expect(projects == 0)
        #expect(try sqlite3CLI(path, "SELECT count(*) FROM t") == "1")
        try store.writer.close()

        let newer = directory.file("newer-lazy.sqlite")
        try Store.open(path: newer).writer.close()
        try sqlite3CLI(newer, "INSERT INTO grdb_migrations (identifier) VALUES ('003_fromTheFuture');")
        let before = fileBytes(newer)
        let prepared = try Store.prepare(path: newer)
        for _ in 0..<2 {
            #expect(throws: StoreError.newerSchema(path: newer, unknownMigrations: ["003_fromTheFuture"])) {
                try prepared.client.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
            }
            #expect(prepared.connectionFailure?.contains("newer opsh") == true)
        }
        #expect(!prepared.isConnected)
        #expect(fileBytes(newer) == before)
        // What prepare can tell without SQLite, it refuses at once.
        let text = directory.file("text.sqlite")
        try String(repeating: "not a database\n", count: 50).write(toFile: text, atomically: true, encoding: .utf8)
        #expect(throws: StoreError.notADatabase(path: text)) { try Store.prepare(path: text) }
    }

    @Test func preparingAMissingFileCreatesAndMigratesItAtOnce() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("new/opsh.sqlite")
        let store = try Store.prepare(path: path)
        #expect(store.isConnected)
        #expect(try sqlite3CLI(path, "SELECT count(*) FROM grdb_migrations") == "8")
    }

    @Test func readOnlyOpenRefusesWritesThroughSQLite() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("db.sqlite")
        try Store.open(path: path).writer.close()
        let store = try Store.open(path: path, options: StoreOptions(readOnly: true))
        do {
            try store.client.write { db in
                try db.execute(sql: "INSERT INTO projects VALUES ('x', 'x', 'x', '/x', 0)")
            }
            Issue.record("a read-only store accepted a write")
        } catch let error as DatabaseError {
            #expect(error.resultCode == .SQLITE_READONLY)
        }
        #expect(try store.client.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM projects") } == 0)
    }

    @Test func readOnlyOpenOfMissingFileDoesNotCreateIt() {
        let directory = TemporaryDirectory()
        let path = directory.file("absent.sqlite")
        #expect(throws: StoreError.missingDatabase(path: path)) {
            try Store.open(path: path, options: StoreOptions(readOnly: true))
        }
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func errorsSayWhatAndWhere() {
        #expect(StoreError.notADatabase(path: "/x/y.db").description.contains("/x/y.db is not an SQLite database"))
        #expect(StoreError.unknownColumn(table: "builds", column: "stauts", known: ["id", "status"]).description
            == "unknown column 'stauts' in builds (columns: id, status)")
    }
}

@Suite struct MigrationTests {
    @Test func migratesAnEmptyFile() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("empty.sqlite")
        _ = FileManager.default.createFile(atPath: path, contents: Data())
        let store = try Store.open(path: path)
        let tables = try store.client.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'grdb%' ORDER BY name")
        }
        #expect(tables == ["analytics_config", "buildLogs", "builds", "configuration", "crashLogs", "generation_sessions",
                           "generations", "model_metadata", "model_usage_stats", "opsh_audit", "opsh_audit_cut", "opsh_audit_prune",
                           "opsh_runners", "opsh_settings", "projects", "routing_policies",
                           "schemes", "storage_config", "telemetry"])
    }

    @Test func upgradesAFileThatStoppedAt001() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("old.sqlite")
        let old = try DatabaseQueue(path: path)
        try StoreMigrations.makeMigrator().migrate(old, upTo: "001_initialSchema")
        try old.write { db in
            try db.execute(sql: "INSERT INTO telemetry (event, created_at) VALUES ('launch', 1)")
        }
        try old.close()

        let store = try Store.open(path: path)
        // Not on its own: opening reports what is pending.
        #expect(store.pendingMigrations == ["002_indexes", "003_audit", "004_runners", "005_auditChain", "006_schemeEnvironment", "007_runnerRegistry", "008_pinnedFunctions"])
        #expect(try sqlite3CLI(path, "SELECT count(*) FROM grdb_migrations") == "1")
        try store.migratePending()
        let (migrations, indexes, rows) = try store.client.read { db in
            (try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid"),
             try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'telemetry_on_created'"),
             try Int.fetchOne(db, sql: "SELECT count(*) FROM telemetry"))
        }
        #expect(migrations == ["001_initialSchema", "002_indexes", "003_audit", "004_runners", "005_auditChain", "006_schemeEnvironment", "007_runnerRegistry", "008_pinnedFunctions"])
        #expect(indexes == ["telemetry_on_created"])
        #expect(rows == 1)
    }

    @Test func everyQueryOfTheCoreUsesAnIndex() throws {
        let store = try Store.inMemory()
        let plans = try store.client.read { db in
            try [
                "SELECT id FROM buildLogs WHERE buildId = 'x' ORDER BY createdAt",
                "SELECT id FROM builds WHERE schemeId IN ('a') ORDER BY createdAt DESC",
                "SELECT id FROM schemes WHERE projectBundleIdentifier = 'x' ORDER BY \"order\"",
                "SELECT count(*) FROM telemetry WHERE created_at < 5",
                "SELECT id FROM builds WHERE status = 'running'",
                "SELECT incidentIdentifier FROM crashLogs WHERE buildId = 'x'",
            ].map { sql in
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql).map { $0["detail"] as String }.joined(separator: "; ")
            }
        }
        for plan in plans {
            #expect(plan.contains("USING") && plan.contains("INDEX"), "\(plan)")
        }
    }
}
