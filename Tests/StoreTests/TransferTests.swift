import Foundation
import GRDB
import Testing
import TextCodec
@testable import Store

/// Export of an aggregate to JSON and import into another database: exact
/// rows, stable round trips, conflicts, malformed documents refused whole.
@Suite struct TransferTests {
    let directory = TemporaryDirectory()

    /// A project with two schemes, builds (one with every nullable column
    /// NULL, one with them set), logs and a crash; a model with usage.
    func seeded(_ name: String = "source.sqlite") throws -> Store {
        let store = try makeStore(in: directory, name: name)
        try store.client.write { db in
            try store.projects.records.insert(db, ProjectRecord(
                bundleIdentifier: "com.example.app", name: "App", displayName: "The \"App\"\n",
                gitRepositoryURL: "/srv/repos/app", createdAt: Date(timeIntervalSince1970: 1_700_000_000.123456)))
            try store.schemes.records.insert(db, SchemeRecord(id: "s1", projectBundleIdentifier: "com.example.app", name: "Release",
                                                              order: 1, buildCommand: "make release", platforms: ["linux", "macos"]))
            var debug = SchemeRecord(id: "s2", projectBundleIdentifier: "com.example.app", name: "Debug", buildCommand: "make")
            debug.platforms = JSONText("{ \"odd\" :  [1, 2.50, null] }")
            try store.schemes.records.insert(db, debug)
            try store.builds.records.insert(db, BuildRecord(id: "b1", schemeId: "s1", versionString: "1.0.0", buildNumber: 1,
                                                            createdAt: Date(timeIntervalSince1970: 0.1)))
            try store.builds.records.insert(db, BuildRecord(
                id: "b2", schemeId: "s1", versionString: "1.1.0", buildNumber: 2, status: .failed,
                createdAt: Date(timeIntervalSince1970: 1_700_000_100.5), startDate: Date(timeIntervalSince1970: 1_700_000_101),
                endDate: Date(timeIntervalSince1970: 1_700_000_160.25), exitCode: -9, progress: 0.5,
                commitHash: "abc123", runnerHost: "ci-3", runnerPid: 4242, runnerStartedAt: Date(timeIntervalSince1970: 1_700_000_099)))
            try store.builds.records.insert(db, BuildRecord(id: "b3", schemeId: "s2", versionString: "main", buildNumber: 1))
            for index in 0..<5 {
                try store.buildLogs.records.insert(db, BuildLogRecord(id: "l\(index)", buildId: "b2", level: .warning,
                                                                      content: "line \(index) ✓", createdAt: Date(timeIntervalSince1970: 1_700_000_102)))
            }
            try store.crashLogs.records.insert(db, CrashLogRecord(incidentIdentifier: "c1", buildId: "b2", content: "segfault", signal: 11))
            // Another project: not exported.
            try store.projects.records.insert(db, ProjectRecord(bundleIdentifier: "other", name: "Other", gitRepositoryURL: "/x"))
            try store.schemes.records.insert(db, SchemeRecord(id: "o1", projectBundleIdentifier: "other", name: "O"))
            try store.builds.records.insert(db, BuildRecord(id: "ob", schemeId: "o1", versionString: "1", buildNumber: 1))

            try store.models.records.insert(db, ModelMetadataRecord(id: "m1", name: "Llama", format: "gguf", sizeBytes: 1 << 40,
                                                                    framework: "llama.cpp", capabilities: JSONText("[\"chat\"]")))
            try store.models.records.insert(db, ModelMetadataRecord(id: "m2", name: "Other", format: "onnx", framework: "onnx"))
            try store.models.usageStats.insert(db, ModelUsageStatRecord(modelId: "m2", day: "2024-05-01"))
            try store.models.usageStats.insert(db, ModelUsageStatRecord(modelId: "m1", day: "2024-05-01", generationCount: 3,
                                                                   totalTokens: 100, totalCost: 0.1 + 0.2, totalLatencyMs: 12.5))
            try store.models.usageStats.insert(db, ModelUsageStatRecord(modelId: "m1", day: "2024-05-02", errorCount: 1))
        }
        return store
    }

    /// Every row of the tables, as SQLite stores them (type and value).
    func dump(_ store: Store, _ tables: [String]) throws -> [String] {
        try store.writer.read { db in
            try tables.flatMap { table in
                try Row.fetchAll(db, sql: "SELECT * FROM \(table) ORDER BY rowid").map { row in
                    table + " " + row.columnNames.map { column -> String in
                        let value = row[column] as DatabaseValue
                        switch value.storage {
                        case .null: return "\(column)=NULL"
                        case let .int64(v): return "\(column)=int:\(v)"
                        case let .double(v): return "\(column)=real:\(v.bitPattern)"
                        case let .string(v): return "\(column)=text:\(v)"
                        case let .blob(v): return "\(column)=blob:\(v.count)"
                        }
                    }.joined(separator: " ")
                }.sorted()
            }
        }
    }

    static let projectTables = ["projects", "schemes", "builds", "buildLogs", "crashLogs"]
    static let modelTables = ["model_metadata", "model_usage_stats"]

    func projectRows(_ store: Store, except other: [String] = ["other", "o1", "ob"]) throws -> [String] {
        try dump(store, Self.projectTables).filter { line in !other.contains { line.contains("=text:\($0) ") } }
    }

    @Test func projectRoundTripIsExact() throws {
        let source = try seeded()
        let (text, summary) = try source.exportProject("com.example.app")
        #expect(summary.tables.map(\.rows) == [1, 2, 3, 5, 1])
        let target = try makeStore(in: directory, name: "target.sqlite")
        let imported = try target.importDocument(text)
        #expect(imported.tables.map(\.rows) == [1, 2, 3, 5, 1])
        #expect(imported.tables.map(\.replaced) == [0, 0, 0, 0, 0])
        #expect(try dump(target, Self.projectTables) == projectRows(source))
        // Export again from the copy: the same text; import it a second time somewhere else: the same rows.
        let (again, _) = try target.exportProject("com.example.app")
        #expect(again == text)
        let third = try makeStore(in: directory, name: "third.sqlite")
        try third.importDocument(again)
        #expect(try dump(third, Self.projectTables) == dump(target, Self.projectTables))
        #expect(try third.exportProject("com.example.app").text == text)
    }

    @Test func documentShape() throws {
        let source = try seeded()
        let (text, _) = try source.exportProject("com.example.app", options: .init(logs: false))
        let document = try JSON.parse(text)
        #expect(document["format"] == .string("opsh-export"))
        #expect(document["version"] == .integer(1))
        #expect(document["kind"] == .string("project"))
        #expect(document["key"] == .string("com.example.app"))
        guard case let .object(tables)? = document["tables"] else { Issue.record("no tables"); return }
        #expect(tables.map(\.0) == ["projects", "schemes", "builds"])
        // JSON columns are their text, byte for byte; NULL is null; dates are floats.
        #expect(text.contains(#""platforms": "{ \"odd\" :  [1, 2.50, null] }""#))
        #expect(text.contains(#""endDate": null"#))
        #expect(text.contains(#""createdAt": 1700000000.123456"#))
        #expect(text.contains(#""startDate": 1700000101.0"#))
        // Without logs, the import writes none.
        let target = try makeStore(in: directory, name: "target.sqlite")
        let summary = try target.importDocument(text)
        #expect(summary.rows("buildLogs") == 0 && summary.rows("builds") == 3)
        #expect(try dump(target, ["buildLogs", "crashLogs"]) == [])
    }

    @Test func modelRoundTripKeepsFreeIdsAndGivesNewOnes() throws {
        let source = try seeded()
        let (text, summary) = try source.exportModel("m1")
        #expect(summary.tables.map(\.rows) == [1, 2])
        let target = try makeStore(in: directory, name: "target.sqlite")
        try target.importDocument(text)
        #expect(try dump(target, Self.modelTables) == dump(source, Self.modelTables).filter { !$0.contains("m2") })
        #expect(try target.exportModel("m1").text == text)

        // A target whose usage id 2 belongs to another model: the imported row gets a new id.
        let busy = try makeStore(in: directory, name: "busy.sqlite")
        try busy.client.write { db in
            try busy.models.records.insert(db, ModelMetadataRecord(id: "x", name: "X", format: "f", framework: "f"))
            try busy.models.usageStats.insert(db, ModelUsageStatRecord(id: 2, modelId: "x", day: "2024-01-01"))
        }
        try busy.importDocument(text)
        let ids = try busy.writer.read { db in
            try Int64.fetchAll(db, sql: "SELECT id FROM model_usage_stats WHERE model_id = 'm1' ORDER BY day")
        }
        #expect(ids == [4, 3])
    }

    /// A row another process wrote between the check and the write (here
    /// a log line in the middle of the import's multi-row INSERTs, or of
    /// its COPY) refuses the whole import, naming that row alone: not the
    /// rows this import wrote before it in its own transaction. Nothing of
    /// the import stays. Control: the same prepared import goes in whole
    /// without that row.
    @Test(arguments: Engine.allCases)
    func aRowWrittenSinceTheCheckRefusesTheWholeImportNamingIt(_ engine: Engine) throws {
        let source = try seeded()
        try source.client.write { db in
            for index in 5..<300 {
                try db.execute(sql: "INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES (?, 'b2', ?, ?)",
                               arguments: ["l\(index)", "line \(index)", 1_700_000_103 + index])
            }
        }
        let (text, _) = try source.exportProject("com.example.app")

        /// A new database on `engine`: the import checked there, then
        /// written (nil: not yet), and SQL from another process.
        struct Target {
            let check: () throws -> Transfer.PreparedImport
            let write: (Transfer.PreparedImport) throws -> Transfer.Summary
            let sql: (String) throws -> String
        }
        func target(_ name: String) throws -> Target {
            switch engine {
            case .sqlite:
                let store = try makeStore(in: directory, name: name + ".sqlite")
                let path = try #require(store.path)
                return Target(check: { try store.writer.read { db in try Transfer.prepareImport(db, text) } },
                              write: { checked in try store.writer.write { db in try Transfer.apply(StoreDatabase(db), checked, rowByRowObservers: false) } },
                              sql: { try sqlite3CLI(path, $0) })
            case .postgresql:
                let server = try PostgresServer.shared()
                let url = try server.makeDatabase()
                let database = try PostgresDatabase(url: url, options: .init(create: true))
                return Target(check: { try Transfer.prepareImport(database, text) },
                              write: { checked in try database.transaction { try Transfer.apply(database, checked) } },
                              sql: { try server.sql($0, url: url).trimmingCharacters(in: .whitespacesAndNewlines) })
            }
        }

        let refusing = try target("target")
        let checked = try refusing.check()
        // Another process writes one of the document's log lines (its build
        // is not there: foreign keys off, sqlite3's default; on PostgreSQL
        // the session's replication role skips them).
        let theirs = "INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES ('l200', 'b2', 'theirs', 1)"
        _ = try refusing.sql(engine == .sqlite ? theirs : "SET session_replication_role = replica; " + theirs)
        #expect(throws: TransferError.conflict(
            "import refused: 1 row(s) were written by another process since the document was checked (buildLogs \"l200\"); nothing was written; import again, with replace = true to overwrite them")) {
            _ = try refusing.write(checked)
        }
        #expect(try refusing.sql("SELECT (SELECT count(*) FROM projects) || ' ' || (SELECT count(*) FROM builds) || ' ' || (SELECT string_agg(content, ',') FROM buildLogs)"
            .replacingOccurrences(of: "string_agg(content, ',')", with: engine == .sqlite ? "group_concat(content)" : "string_agg(content, ',')"))
            == "0 0 theirs")

        let control = try target("control")
        let summary = try control.write(try control.check())
        #expect(summary.rows("buildLogs") == 300)
        #expect(try control.sql("SELECT count(*) FROM buildLogs") == "300")
    }

    @Test func conflictsAreRefusedOrReplaced() throws {
        let source = try seeded()
        let (text, _) = try source.exportProject("com.example.app")
        // Importing into its own database: every row exists.
        let before = try dump(source, Self.projectTables)
        #expect(throws: TransferError.conflict(
            "import refused: 12 row(s) already exist (projects \"com.example.app\", schemes \"s2\", schemes \"s1\", builds \"b3\", builds \"b1\" and 7 more); nothing was written; import with replace = true to overwrite them")) {
            try source.importDocument(text)
        }
        #expect(try dump(source, Self.projectTables) == before)

        // A target with a changed copy of one build: replace overwrites it, keeps rows the document does not name.
        let target = try makeStore(in: directory, name: "target.sqlite")
        try target.importDocument(text)
        try target.client.write { db in
            try db.execute(sql: "UPDATE builds SET status = 'succeeded', exitCode = 0 WHERE id = 'b2'")
            try db.execute(sql: "INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES ('extra', 'b2', 'kept', 1)")
        }
        #expect(throws: TransferError.self) { try target.importDocument(text) }
        let summary = try target.importDocument(text, options: .init(replace: true))
        #expect(summary.tables.map(\.replaced) == [1, 2, 3, 5, 1])
        #expect(try dump(target, Self.projectTables).filter { !$0.contains("extra") } == projectRows(source))
        #expect(try dump(target, ["buildLogs"]).contains { $0.contains("=text:extra ") })

        // Usage stats conflict by model and day; replace keeps the target's id.
        let models = try makeStore(in: directory, name: "models.sqlite")
        try models.client.write { db in
            try models.models.records.insert(db, ModelMetadataRecord(id: "m1", name: "Old", format: "f", framework: "f"))
            try models.models.usageStats.insert(db, ModelUsageStatRecord(id: 7, modelId: "m1", day: "2024-05-02", errorCount: 9))
        }
        let (modelText, _) = try source.exportModel("m1")
        #expect(throws: TransferError.conflict(
            "import refused: 2 row(s) already exist (model_metadata \"m1\", model_usage_stats \"m1\"/\"2024-05-02\"); nothing was written; import with replace = true to overwrite them")) {
            try models.importDocument(modelText)
        }
        try models.importDocument(modelText, options: .init(replace: true))
        let rows = try models.writer.read { db in
            try Row.fetchAll(db, sql: "SELECT id, day, error_count FROM model_usage_stats ORDER BY day").map { "\($0)" }
        }
        #expect(rows == ["[id:2 day:\"2024-05-01\" error_count:0]", "[id:7 day:\"2024-05-02\" error_count:1]"])
        #expect(try models.writer.read { db in try String.fetchOne(db, sql: "SELECT name FROM model_metadata") } == "Llama")
    }

    /// A valid project document to damage.
    func document() throws -> String {
        try seeded("damaged-source.sqlite").exportProject("com.example.app").text
    }

    static let malformed: [(String, @Sendable (String) -> String, String)] = [
        ("bad JSON", { $0.replacingOccurrences(of: "\"version\": 1,", with: "\"version\": 1,,") },
         "not valid JSON at line 3, column 16: expected a string key, found ','"),
        ("not JSON at all", { _ in "" }, "not valid JSON at line 1, column 1: unexpected end of text, expected a value"),
        ("an array", { _ in "[]" }, "an export document must be a JSON object, got array"),
        ("other format", { $0.replacingOccurrences(of: "\"opsh-export\"", with: "\"csv\"") },
         "not an opsh export: format must be \"opsh-export\""),
        ("wrong version", { $0.replacingOccurrences(of: "\"version\": 1,", with: "\"version\": 2,") },
         "unsupported export version 2 (this opsh reads version 1)"),
        ("version as text", { $0.replacingOccurrences(of: "\"version\": 1,", with: "\"version\": \"1\",") },
         "field 'version': integer expected, got string"),
        ("unknown kind", { $0.replacingOccurrences(of: "\"kind\": \"project\"", with: "\"kind\": \"user\"") },
         "field 'kind': one of \"project\", \"model\" expected"),
        ("missing key", { $0.replacingOccurrences(of: "\"key\": \"com.example.app\",", with: "") },
         "missing field 'key' in the document"),
        ("unknown table", { $0.replacingOccurrences(of: "\"crashLogs\":", with: "\"crashes\":") },
         "unknown table 'crashes' in a project export (tables: projects, schemes, builds, buildLogs, crashLogs)"),
        ("missing field", { $0.replacingOccurrences(of: "\"versionString\": \"1.1.0\", ", with: "") },
         "builds[3]: missing field 'versionString'"),
        ("unknown field", { $0.replacingOccurrences(of: "\"versionString\": \"1.1.0\"", with: "\"versionString\": \"1.1.0\", \"colour\": 1") },
         "builds[3]: unknown field 'colour' (columns: id, schemeId, versionString, buildNumber, status, createdAt, startDate, endDate, exitCode, progress, commitHash, runnerHost, runnerPid, runnerStartedAt, runnerId, heartbeatAt, heartbeatInterval, attempts)"),
        ("wrong type", { $0.replacingOccurrences(of: "\"buildNumber\": 2", with: "\"buildNumber\": \"2\"") },
         "builds[3]: field 'buildNumber': integer expected, got string"),
        ("float for an integer", { $0.replacingOccurrences(of: "\"exitCode\": -9", with: "\"exitCode\": -9.5") },
         "builds[3]: field 'exitCode': integer expected, got number"),
        ("null where not null", { $0.replacingOccurrences(of: "\"versionString\": \"1.1.0\"", with: "\"versionString\": null") },
         "builds[3]: field 'versionString' must not be null"),
        ("bad status", { $0.replacingOccurrences(of: "\"status\": \"failed\"", with: "\"status\": \"exploded\"") },
         "builds[3]: field 'status': 'exploded' is not one of queued, running, succeeded, failed, cancelled"),
        ("invalid JSON column", { $0.replacingOccurrences(of: #"\"macos\"]""#, with: #"""#) },
         "schemes[2]: field 'platforms': not valid JSON: [\"linux\","),
        ("a build whose scheme is not in the document", { $0.replacingOccurrences(of: "\"schemeId\": \"s1\", \"versionString\": \"1.1.0\"", with: "\"schemeId\": \"o1\", \"versionString\": \"1.1.0\"") },
         "builds[3]: schemeId \"o1\" is not a row of schemes in the document"),
        ("a duplicate row", { $0.replacingOccurrences(of: "\"id\": \"b3\"", with: "\"id\": \"b2\"") },
         "builds[3]: a second row with the key \"b2\""),
        ("a root that is not the key", { $0.replacingOccurrences(of: "\"key\": \"com.example.app\"", with: "\"key\": \"com.example.other\"") },
         "projects[1]: bundleIdentifier \"com.example.app\" is not the document's key \"com.example.other\""),
    ]

    @Test(arguments: malformed.map { ($0.0, $0.2) })
    func malformedDocumentsAreRefusedAndWriteNothing(_ name: String, _ message: String) throws {
        let text = try document()
        let damage = Self.malformed.first { $0.0 == name }!.1
        let damaged = damage(text)
        #expect(damaged != text, "the damage of '\(name)' changed nothing")
        let target = try makeStore(in: directory, name: "target.sqlite")
        var caught: (any Error)?
        do { try target.importDocument(damaged) } catch { caught = error }
        #expect((caught as? TransferError) == .document(message), "\(name): \(String(describing: caught))")
        #expect(try dump(target, Self.projectTables) == [])
    }

    /// A row the checks accept but SQLite refuses (a CHECK constraint), in
    /// the middle of the document: the rows before it are rolled back.
    @Test func aFailedWriteInTheMiddleLeavesNothing() throws {
        let text = try document().replacingOccurrences(of: "\"progress\": 0.5", with: "\"progress\": 7.5")
        let target = try makeStore(in: directory, name: "target.sqlite")
        #expect(throws: DatabaseError.self) { try target.importDocument(text) }
        #expect(try dump(target, Self.projectTables) == [])
    }

    @Test func missingAggregatesAreNotFound() throws {
        let store = try makeStore(in: directory)
        #expect(throws: StoreError.notFound(table: "projects", key: "nope")) { try store.exportProject("nope") }
        #expect(throws: StoreError.notFound(table: "model_metadata", key: "nope")) { try store.exportModel("nope") }
    }

    @Test func jsonTextRoundTrips() throws {
        let value = JSON.object([("a", .array([.integer(-3), .real(2.5), .real(1e-7), .real(3), .null, .bool(true)])),
                                         ("é\"\\\n\u{1}", .string("x\u{1F600}\ty"))])
        #expect(try JSON.parse(value.text()) == value)
        #expect(try JSON.parse(#"["\ud83d\ude00", 1E2, 9223372036854775807]"#)
            == .array([.string("\u{1F600}"), .real(100), .integer(Int64.max)]))
    }
}
