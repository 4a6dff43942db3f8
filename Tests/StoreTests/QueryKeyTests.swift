import Foundation
import GRDB
import Testing
import TestSupport
@testable import Store

@Suite struct QueryKeyParsingTests {
    @Test(arguments: [
        ("projects.all.ids", QueryKey.allProjectIds),
        ("projects.versionStrings", .projectVersionStrings),
        ("project.\"com.example.app\"", .project("com.example.app")),
        ("project.\"com.example.app\".detail", .projectDetail("com.example.app")),
        ("project.\"com.example.app\".schemes.ids", .projectSchemeIds("com.example.app")),
        ("project.\"com.example.app\".buildVersionStrings", .projectBuildVersionStrings("com.example.app")),
        ("project.\"com.example.app\".latestBuilds.limit3", .projectLatestBuilds("com.example.app", limit: 3)),
        ("scheme.0b5c-11", .scheme("0b5c-11")),
        ("schemes.a,b,c.builds.ids", .schemeBuildIds(["a", "b", "c"], version: nil)),
        ("schemes.a,\"b.c\".builds.ids.\"1.2.0\"", .schemeBuildIds(["a", "b.c"], version: "1.2.0")),
        ("build.f00d", .build("f00d")),
        ("build.f00d.logs.ids", .buildLogIds("f00d", includeDebug: false, category: nil)),
        ("build.f00d.logs.ids.debug", .buildLogIds("f00d", includeDebug: true, category: nil)),
        ("build.f00d.logs.ids.debug.categorytest", .buildLogIds("f00d", includeDebug: true, category: "test")),
        ("build.f00d.logs.ids.category\"unit tests\"", .buildLogIds("f00d", includeDebug: false, category: "unit tests")),
        ("build.f00d.crashLogs.ids", .buildCrashLogIds("f00d")),
        ("buildLog.1", .buildLog("1")),
        ("crashLog.\"INC-1.2\"", .crashLog("INC-1.2")),
        ("models.all.ids", .allModelIds),
        ("model.\"llama-3.1\".usage", .modelUsage("llama-3.1")),
        ("session.s1.generations", .sessionGenerations("s1")),
        ("telemetry.counts", .telemetryCounts),
        ("config", .configuration("default")),
    ])
    func seedVocabularyParsesAndPrintsCanonically(text: String, key: QueryKey) throws {
        #expect(try QueryKey(parsing: text) == key)
        #expect(key.description == text)
    }

    @Test func quotesInsideIdsAreDoubled() throws {
        let key = QueryKey.project("say \"hi\".app")
        #expect(key.description == "project.\"say \"\"hi\"\".app\"")
        #expect(try QueryKey(parsing: key.description) == key)
        // A quote followed by a combining mark is one Character but two
        // scalars: still doubled, still read back (found by FuzzTests).
        let combining = QueryKey.project("a\"\u{301}b")
        #expect(combining.description == "project.\"a\"\"\u{301}b\"")
        #expect(try QueryKey(parsing: combining.description) == combining)
    }

    @Test(arguments: [
        ("", 1, "a key such as projects.all.ids"),
        ("projects.all", 13, "'.' and 'ids' after the end of the key"),
        ("project.com.example.app", 13, "one of 'detail', 'schemes', 'buildVersionStrings', 'latestBuilds', found 'example' (quote an id that holds '.', e.g. project.\"com.example.app\")"),
        ("project.x.detail.more", 17, "the end of the key, found '.more'"),
        ("project.\"com.example.app", 9, "a closing '\"' for the quote opened here"),
        ("project.x.latestBuilds.limit", 29, "a whole number from 1 to 1000000 after 'limit'"),
        ("project.x.latestBuilds.limitten", 29, "a whole number from 1 to 1000000 after 'limit'"),
        ("projectz.x", 1, "one of 'projects', 'project', 'scheme', 'schemes', 'build', 'buildLog', 'crashLog', 'models', 'model', 'session', 'telemetry', 'config', found 'projectz'"),
        ("build..logs", 7, "a name, an id or a quoted \"text\", found '.'"),
        ("build.x.logs.ids.verbose", 18, "'debug' or category{c}, e.g. categorybuild or category\"unit tests\", found 'verbose'"),
        ("build.x y", 8, "'.' between segments, found ' '"),
        ("scheme.a,b", 9, "a scheme id, not a ',' list"),
        // Positions count characters, not bytes: é is 2 bytes, 🙂 4.
        ("project.\"é🙂\".x", 14, "one of 'detail', 'schemes', 'buildVersionStrings', 'latestBuilds', found 'x' (quote an id that holds '.', e.g. project.\"com.example.app\")"),
        ("build.é", 7, "a name, an id or a quoted \"text\", found 'é'"),
    ])
    func malformedKeysSayWhereAndWhat(text: String, position: Int, expected: String) {
        do {
            _ = try QueryKey(parsing: text)
            Issue.record("'\(text)' parsed")
        } catch let error as QueryKeyError {
            #expect(error.position == position, "\(error)")
            #expect(error.expected == expected, "\(error)")
            #expect(error.description.hasPrefix("malformed query key '\(text)' at position \(position): expected"))
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    /// parse(print(k)) == k for many generated keys with hostile ids.
    @Test func everyGeneratedKeyRoundTrips() throws {
        var generator = SeededGenerator(seed: 0x0b5)
        for _ in 0..<5_000 {
            let key = randomKey(&generator)
            let printed = key.description
            #expect(try QueryKey(parsing: printed) == key, "\(printed)")
        }
    }

    private func randomKey(_ g: inout SeededGenerator) -> QueryKey {
        let id = { (g: inout SeededGenerator) -> String in randomID(&g) }
        switch Int.random(in: 0..<21, using: &g) {
        case 0: return .allProjectIds
        case 1: return .projectVersionStrings
        case 2: return .project(id(&g))
        case 3: return .projectDetail(id(&g))
        case 4: return .projectSchemeIds(id(&g))
        case 5: return .projectBuildVersionStrings(id(&g))
        case 6: return .projectLatestBuilds(id(&g), limit: Int.random(in: 1...1_000_000, using: &g))
        case 7: return .scheme(id(&g))
        case 8:
            let ids = (0..<Int.random(in: 1...4, using: &g)).map { _ in id(&g) }
            return .schemeBuildIds(ids, version: Bool.random(using: &g) ? id(&g) : nil)
        case 9: return .build(id(&g))
        case 10: return .buildLogIds(id(&g), includeDebug: Bool.random(using: &g), category: Bool.random(using: &g) ? id(&g) : nil)
        case 11: return .buildCrashLogIds(id(&g))
        case 12: return .buildLog(id(&g))
        case 13: return .crashLog(id(&g))
        case 14: return .allModelIds
        case 15: return .model(id(&g))
        case 16: return .modelUsage(id(&g))
        case 17: return .session(id(&g))
        case 18: return .sessionGenerations(id(&g))
        case 19: return .telemetryCounts
        default: return .configuration(id(&g))
        }
    }

    private func randomID(_ g: inout SeededGenerator) -> String {
        let alphabet: [Character] = ["a", "Z", "0", "9", "-", "_", ".", ",", "\"", " ", "é", "🙂", "\n", "\\", "'", "{", "}"]
        return String((0..<Int.random(in: 0...8, using: &g)).map { _ in alphabet.randomElement(using: &g)! })
    }
}

/// A deterministic random generator (SplitMix64), so failures reproduce.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
}

@Suite struct QueryKeyFetchTests {
    /// A database file: Store.value(of:) reads a file's keys on a
    /// connection of its own (KeyReader), which an in-memory store has not.
    let directory = TemporaryDirectory()

    /// Two projects; the app has two schemes and builds of two versions.
    private func populated() throws -> (Store, app: SchemeRecord, tests: SchemeRecord, builds: [BuildRecord]) {
        let store = try Store.open(path: directory.file("keys.sqlite"))
        let app = try seedProject(store, scheme: "App")
        let tests = try seedProject(store, scheme: "Tests")
        try seedProject(store, id: "org.other.tool", scheme: "Tool")
        let builds = try store.client.write { db in
            try [(app, "1.2.0", 10.0), (app, "1.10.0", 20.0), (tests, "1.10.0", 30.0)].map { scheme, version, time in
                try store.builds.create(db, scheme: scheme.id, version: version, at: Date(timeIntervalSince1970: time))
            }
        }
        return (store, app, tests, builds)
    }

    private func fetch(_ store: Store, _ key: String) throws -> StoreValue {
        let key = try QueryKey(parsing: key)
        let value = try store.client.read { db in try key.fetch(db) }
        // Store.value(of:) (a key of one statement without a transaction
        // around it) gives the same.
        #expect(try store.value(of: key) == value, "\(key)")
        return value
    }

    @Test func projectKeys() throws {
        let (store, app, tests, builds) = try populated()
        #expect(try fetch(store, "projects.all.ids") == .array([.text("com.example.app"), .text("org.other.tool")]))
        #expect(try fetch(store, "projects.versionStrings") == .object([.init("com.example.app", .array([.text("1.10.0"), .text("1.2.0")]))]))
        #expect(try fetch(store, "project.\"com.example.app\"")["gitRepositoryURL"] == .text("/srv/repos/app"))
        #expect(try fetch(store, "project.missing") == .null)
        #expect(try fetch(store, "project.\"com.example.app\".schemes.ids") == .array([.text(app.id), .text(tests.id)]))
        #expect(try fetch(store, "project.\"com.example.app\".buildVersionStrings") == .array([.text("1.2.0"), .text("1.10.0")]))
        let latest = try fetch(store, "project.\"com.example.app\".latestBuilds.limit2").arrayValue ?? []
        #expect(latest.map { $0["id"] } == [.text(builds[2].id), .text(builds[1].id)])
        let detail = try fetch(store, "project.\"com.example.app\".detail")
        #expect(detail["schemeIds"]?.arrayValue?.count == 2)
        #expect(detail["recentBuildIds"]?.arrayValue?.first == .text(builds[2].id))
    }

    @Test func schemeAndBuildKeys() throws {
        let (store, app, tests, builds) = try populated()
        #expect(try fetch(store, "scheme.\(app.id)")["name"] == .text("App"))
        #expect(try fetch(store, "schemes.\(app.id),\(tests.id).builds.ids") == .array(builds.reversed().map { .text($0.id) }))
        #expect(try fetch(store, "schemes.\(app.id),\(tests.id).builds.ids.\"1.10.0\"") == .array([.text(builds[2].id), .text(builds[1].id)]))
        let build = builds[0]
        try store.client.write { db in
            try store.buildLogs.append(db, [
                BuildLogRecord(id: "l1", buildId: build.id, level: .info, category: "checkout", content: "cloning", createdAt: Date(timeIntervalSince1970: 1)),
                BuildLogRecord(id: "l2", buildId: build.id, level: .debug, category: "build", content: "cc -O2", createdAt: Date(timeIntervalSince1970: 2)),
                BuildLogRecord(id: "l3", buildId: build.id, level: .warning, category: "build", content: "unused x", createdAt: Date(timeIntervalSince1970: 3)),
            ])
            try store.crashLogs.records.insert(db, CrashLogRecord(incidentIdentifier: "INC.1", buildId: build.id, content: "segv", signal: 11))
        }
        #expect(try fetch(store, "build.\(build.id)")["versionString"] == .text("1.2.0"))
        #expect(try fetch(store, "build.\(build.id).logs.ids") == .array([.text("l1"), .text("l3")]))
        #expect(try fetch(store, "build.\(build.id).logs.ids.debug") == .array([.text("l1"), .text("l2"), .text("l3")]))
        #expect(try fetch(store, "build.\(build.id).logs.ids.debug.categorybuild") == .array([.text("l2"), .text("l3")]))
        #expect(try fetch(store, "build.\(build.id).crashLogs.ids") == .array([.text("INC.1")]))
        #expect(try fetch(store, "buildLog.l2")["content"] == .text("cc -O2"))
        #expect(try fetch(store, "crashLog.\"INC.1\"")["signal"] == .integer(11))
    }

    @Test func analyticsKeys() throws {
        let store = try Store.inMemory()
        try store.client.write { db in
            try store.models.records.insert(db, ModelMetadataRecord(id: "llama-3.1", name: "Llama", format: "gguf", framework: "llama.cpp"))
            let session = try store.sessions.records.insert(db, GenerationSessionRecord(id: "s1", modelId: "llama-3.1"))
            try store.sessions.addGeneration(db, GenerationRecord(sessionId: session.id, sequenceNumber: 1, promptTokens: 5, completionTokens: 7))
            try store.telemetry.insertBatch(db, [.init(event: "launch"), .init(event: "launch"), .init(event: "crash")])
            try store.configuration.save(db, SDKConfiguration(apiKey: "sk-1", baseURL: "https://x"))
        }
        #expect(try fetch(store, "models.all.ids") == .array([.text("llama-3.1")]))
        #expect(try fetch(store, "model.\"llama-3.1\"")["framework"] == .text("llama.cpp"))
        #expect(try fetch(store, "model.\"llama-3.1\".usage").arrayValue?.first?["total_tokens"] == .integer(12))
        #expect(try fetch(store, "session.s1")["total_tokens"] == .integer(12))
        #expect(try fetch(store, "session.s1.generations").arrayValue?.count == 1)
        #expect(try fetch(store, "telemetry.counts") == .object([.init("crash", .integer(1)), .init("launch", .integer(2))]))
        #expect(try fetch(store, "config")["storage"]?["telemetry_retention_days"] == .integer(30))
    }
}
