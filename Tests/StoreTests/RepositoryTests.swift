import Foundation
import GRDB
import Testing
@testable import Store
import TextCodec

@Suite struct BuildServerRepositoryTests {
    @Test func projectSchemeBuildLifecycle() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        let scheme = try seedProject(store)
        let (first, second) = try store.client.write { db in
            (try store.builds.create(db, scheme: scheme.id, version: "1.0.0"),
             try store.builds.create(db, scheme: scheme.id, version: "1.1.0"))
        }
        #expect(first.buildNumber == 1)
        #expect(second.buildNumber == 2)
        #expect(first.status == .queued)

        try store.client.write { db in
            _ = try store.builds.records.update(db, first.id, changes: ["status": "running".databaseValue, "progress": 0.5.databaseValue])
        }
        let reloaded = try store.client.read { db in try store.builds.records.require(db, first.id) }
        #expect(reloaded.status == .running)
        #expect(reloaded.progress == 0.5)
        #expect(abs(reloaded.createdAt.timeIntervalSince(first.createdAt)) < 0.001)
    }

    @Test func listFiltersOrdersAndPages() throws {
        let store = try Store.inMemory()
        let scheme = try seedProject(store)
        try store.client.write { db in
            for index in 1...10 {
                var build = try store.builds.create(db, scheme: scheme.id, version: "1.\(index).0",
                                                    at: Date(timeIntervalSince1970: Double(1000 + index)))
                build.status = index % 2 == 0 ? .succeeded : .failed
                try store.builds.records.update(db, build)
            }
        }
        let page = try store.client.read { db in
            try store.builds.records.list(db, ListRequest(
                filters: [ColumnFilter("status", .equal, "succeeded")],
                order: [ColumnOrder("createdAt", descending: true)], limit: 2, offset: 1))
        }
        #expect(page.map(\.versionString) == ["1.8.0", "1.6.0"])
        let count = try store.client.read { db in
            try store.builds.records.count(db, ListRequest(filters: [ColumnFilter("buildNumber", .greater, 7)]))
        }
        #expect(count == 3)
    }

    @Test func unknownColumnsAreRefusedWithTheKnownOnes() throws {
        let store = try Store.inMemory()
        #expect(throws: StoreError.self) {
            try store.client.read { db in
                try store.builds.records.list(db, ListRequest(filters: [ColumnFilter("stauts", .equal, "running")]))
            }
        }
        do {
            _ = try store.client.read { db in
                try store.projects.records.makeRecord(db, fields: ["bundleIdentifier": "x".databaseValue, "colour": "red".databaseValue])
            }
            Issue.record("an unknown column was accepted")
        } catch let error as StoreError {
            #expect(error.description.hasPrefix("unknown column 'colour' in projects (columns: bundleIdentifier, name"))
        }
    }

    @Test func invalidEnumValueIsRefusedAndNothingChanges() throws {
        let store = try Store.inMemory()
        let scheme = try seedProject(store)
        let build = try store.client.write { db in try store.builds.create(db, scheme: scheme.id, version: "1.0.0") }
        #expect(throws: StoreError.self) {
            try store.client.write { db in
                _ = try store.builds.records.update(db, build.id, changes: ["status": "exploded".databaseValue])
            }
        }
        #expect(try store.client.read { db in try store.builds.records.require(db, build.id).status } == .queued)
    }

    @Test func deletingABuildDeletesItsLogsAndCrashLogs() throws {
        let store = try Store.inMemory()
        let scheme = try seedProject(store)
        let build = try store.client.write { db in
            let build = try store.builds.create(db, scheme: scheme.id, version: "1.0.0")
            try store.buildLogs.append(db, (1...5).map { BuildLogRecord(buildId: build.id, content: "line \($0)") })
            try store.crashLogs.records.insert(db, CrashLogRecord(buildId: build.id, content: "boom", signal: 11))
            return build
        }
        try store.client.write { db in _ = try store.builds.delete(db, build.id) }
        let (logs, crashes) = try store.client.read { db in
            (try store.buildLogs.records.count(db), try store.crashLogs.records.count(db))
        }
        #expect(logs == 0)
        #expect(crashes == 0)
    }

    @Test func runningBuildCannotBeDeleted() throws {
        let store = try Store.inMemory()
        let scheme = try seedProject(store)
        let build = try store.client.write { db in
            var build = try store.builds.create(db, scheme: scheme.id, version: "1.0.0")
            build.status = .running
            try store.builds.records.update(db, build)
            return build
        }
        #expect(throws: StoreError.refused(reason: "build \(build.id) is running; cancel it first")) {
            try store.client.write { db in _ = try store.builds.delete(db, build.id) }
        }
    }

    @Test func projectWithBuildsIsDeletedOnlyWhenAskedToCascade() throws {
        let store = try Store.inMemory()
        let scheme = try seedProject(store)
        try store.client.write { db in
            let build = try store.builds.create(db, scheme: scheme.id, version: "1.0.0")
            try store.buildLogs.append(db, [BuildLogRecord(buildId: build.id, content: "hello")])
        }
        #expect(throws: StoreError.self) {
            try store.client.write { db in _ = try store.projects.delete(db, "com.example.app") }
        }
        #expect(try store.client.read { db in try store.schemes.records.count(db) } == 1)
        try store.client.write { db in _ = try store.projects.delete(db, "com.example.app", cascade: true) }
        let remaining = try store.client.read { db in
            try ["projects", "schemes", "builds", "buildLogs"].map { try Int.fetchOne(db, sql: "SELECT count(*) FROM \($0)")! }
        }
        #expect(remaining == [0, 0, 0, 0])
    }

    @Test func projectWithoutBuildsTakesItsSchemes() throws {
        let store = try Store.inMemory()
        try seedProject(store)
        try store.client.write { db in _ = try store.projects.delete(db, "com.example.app") }
        #expect(try store.client.read { db in try store.schemes.records.count(db) } == 0)
    }

    @Test func upsertInsertsThenUpdates() throws {
        let store = try Store.inMemory()
        var project = ProjectRecord(bundleIdentifier: "org.ops.tool", name: "Tool", gitRepositoryURL: "/a")
        _ = try store.client.write { db in try store.projects.records.upsert(db, project) }
        project.gitRepositoryURL = "/b"
        _ = try store.client.write { db in try store.projects.records.upsert(db, project) }
        let all = try store.client.read { db in try store.projects.records.list(db) }
        #expect(all.map(\.gitRepositoryURL) == ["/b"])
    }

    @Test func tailReturnsTheLastLinesInOrder() throws {
        let store = try Store.inMemory()
        let scheme = try seedProject(store)
        let build = try store.client.write { db in
            let build = try store.builds.create(db, scheme: scheme.id, version: "1.0.0")
            let start = Date()
            try store.buildLogs.append(db, (1...20).map {
                BuildLogRecord(buildId: build.id, level: $0 == 20 ? .debug : .info, content: "line \($0)",
                               createdAt: start.addingTimeInterval(Double($0)))
            })
            return build
        }
        let tail = try store.client.read { db in try store.buildLogs.tail(db, build: build.id, count: 3, includeDebug: false) }
        #expect(tail.map(\.content) == ["line 17", "line 18", "line 19"])
    }
}

@Suite struct AnalyticsRepositoryTests {
    @Test func invalidJSONIsRefusedAndNeverStored() throws {
        let store = try Store.inMemory()
        let model = ModelMetadataRecord(id: "llama", name: "Llama", format: "gguf", framework: "llama.cpp",
                                        capabilities: JSONText("[\"chat\", "))
        do {
            try store.client.write { db in _ = try store.models.records.insert(db, model) }
            Issue.record("invalid JSON was accepted")
        } catch let error as StoreError {
            #expect(error.description == "invalid value for model_metadata.capabilities: not valid JSON: [\"chat\", ")
        }
        // Even raw SQL cannot store it: the schema checks too.
        #expect(throws: DatabaseError.self) {
            try store.client.write { db in
                try db.execute(sql: "INSERT INTO model_metadata (id, name, format, framework, capabilities, created_at, updated_at) VALUES ('x', 'x', 'x', 'x', '{', 0, 0)")
            }
        }
        #expect(try store.client.read { db in try store.models.records.count(db) } == 0)
    }

    @Test func configurationAggregateRoundTrips() throws {
        let store = try Store.inMemory()
        var configuration = SDKConfiguration(apiKey: "sk-secret", baseURL: "https://api.example.com")
        configuration.storage.telemetryRetentionDays = 7
        configuration.analytics.samplingRate = 0.25
        configuration.routingPolicies = [
            .init(name: "small prompts on device", priority: 10, executionTarget: .onDevice,
                  conditions: ["maxTokens": .integer(512), "ratio": .real(0.5), "region": .string("eu/west"), "cloud": .bool(false),
                               "limits": .object([("b", .integer(1)), ("a", .array([.null, .string("x")]))])]),
            .init(name: "the rest in the cloud", priority: 1, executionTarget: .cloud),
        ]
        try store.client.write { db in try store.configuration.save(db, configuration) }
        let loaded = try store.client.read { db in try store.configuration.get(db) }
        #expect(loaded?.routingPolicies.map(\.name) == ["small prompts on device", "the rest in the cloud"])
        #expect(loaded?.routingPolicies.first?.conditions["maxTokens"] == .integer(512))
        // Stored compact, keys sorted at every level, `/` as is; nested
        // objects read back in that order.
        #expect(loaded?.routingPolicies.first?.conditions["limits"] == .object([("a", .array([.null, .string("x")])), ("b", .integer(1))]))
        #expect(try store.client.read { db in try String.fetchOne(db, sql: "SELECT conditions FROM routing_policies WHERE priority = 10") }
            == #"{"cloud":false,"limits":{"a":[null,"x"],"b":1},"maxTokens":512,"ratio":0.5,"region":"eu/west"}"#)
        #expect(loaded?.storage.telemetryRetentionDays == 7)
        #expect(loaded?.analytics.samplingRate == 0.25)
        #expect(try store.client.read { db in try store.configuration.telemetryRetentionDays(db) } == 7)

        configuration.routingPolicies.removeLast()
        try store.client.write { db in try store.configuration.save(db, configuration) }
        #expect(try store.client.read { db in try store.configuration.get(db)?.routingPolicies.count } == 1)
    }

    @Test func generationsKeepSessionTotalsAndDailyUsage() throws {
        let store = try Store.inMemory()
        let day = Date(timeIntervalSince1970: 1_700_000_000) // 2023-11-14
        let session = try store.client.write { db in
            try store.models.records.insert(db, ModelMetadataRecord(id: "phi", name: "Phi", format: "gguf", framework: "llama.cpp"))
            return try store.sessions.records.insert(db, GenerationSessionRecord(modelId: "phi"))
        }
        try store.client.write { db in
            for index in 1...3 {
                try store.sessions.addGeneration(db, GenerationRecord(
                    sessionId: session.id, sequenceNumber: index, promptTokens: 10, completionTokens: 20,
                    latencyMs: 100, cost: 0.5, createdAt: day))
            }
        }
        let (reloaded, usage) = try store.client.read { db in
            (try store.sessions.records.require(db, session.id), try store.models.usage(db, model: "phi"))
        }
        #expect(reloaded.totalTokens == 90)
        #expect(reloaded.totalCost == 1.5)
        #expect(usage.count == 1)
        #expect(usage.first?.day == "2023-11-14")
        #expect(usage.first?.generationCount == 3)
        #expect(usage.first?.totalLatencyMs == 300)
    }

    @Test func telemetryBatchInsertAndCounts() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        let events = (0..<10_000).map { (index: Int) -> TelemetryRepository.Event in
            let name = index % 4 == 0 ? "crash" : "launch"
            let properties: String? = index % 2 == 0 ? "{\"n\":\(index)}" : nil
            return TelemetryRepository.Event(event: name, properties: properties,
                                             createdAt: Date(timeIntervalSince1970: Double(index)))
        }
        try store.client.write { db in try store.telemetry.insertBatch(db, events) }
        let counts = try store.client.read { db in try store.telemetry.countsByEvent(db) }
        #expect(counts.map(\.event) == ["launch", "crash"])
        #expect(counts.map(\.count) == [7500, 2500])
        #expect(try sqlite3CLI(directory.file("opsh.sqlite"), "SELECT properties FROM telemetry WHERE id = 3") == "{\"n\":2}")
    }

    @Test func telemetryBatchWithInvalidJSONRollsBackWholeBatch() throws {
        let store = try Store.inMemory()
        let events = [
            TelemetryRepository.Event(event: "ok", properties: "{}"),
            TelemetryRepository.Event(event: "bad", properties: "{nope"),
        ]
        #expect(throws: StoreError.invalidValue(table: "telemetry", column: "properties", reason: "not valid JSON: {nope")) {
            try store.client.write { db in try store.telemetry.insertBatch(db, events) }
        }
        #expect(try store.client.read { db in try store.telemetry.records.count(db) } == 0)
    }
}
