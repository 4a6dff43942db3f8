import Foundation
import Testing
import LuaRuntime
@testable import Bindings

/// The repository modules (`projects`, `schemes`, `builds`, `logs`,
/// `crashes`, `config`, `models`, `sessions`, `telemetry`) on a real file.
@Suite struct RepositoryModuleTests {
    let test = try! TestSession()

    static let fixture = """
        projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
        schemes.insert{ id = "s1", projectBundleIdentifier = "com.example.app", name = "Release", platforms = {"ios"} }
        builds.insert{ id = "b1", schemeId = "s1", versionString = "1.0.0", buildNumber = 1, createdAt = 1000 }
        builds.insert{ id = "b2", schemeId = "s1", versionString = "1.1.0", buildNumber = 2, status = "running", createdAt = 2000 }
        logs.insert{ id = "l1", buildId = "b1", content = "compiling", createdAt = 1001 }
        crashes.insert{ incidentIdentifier = "c1", buildId = "b1", content = "SIGSEGV", signal = 11 }
        models.insert{ id = "m1", name = "M", format = "gguf", framework = "llama.cpp", capabilities = {"chat"} }
        sessions.insert{ id = "g1", model_id = "m1" }
        telemetry.insert{ event = "app.start", properties = { build = 42 } }
        config.save{ base_url = "https://api.example.com", api_key = "sk-secret-0123456789" }
        """

    func loadFixture() throws {
        try test.run(Self.fixture)
    }

    /// Everything in the file, to compare before and after.
    func dump() throws -> String {
        try test.databaseFingerprint()
    }

    // MARK: Happy paths

    @Test func insertFillsDefaultsAndGetReturnsTheRow() throws {
        try loadFixture()
        let values = try test.run("""
            local p = projects.get("com.example.app")
            local s = schemes.get("s1")
            local b = builds.get("b1")
            return p.displayName, math.type(p.createdAt), s.platforms, s.order, b.status, b.progress,
                   b.startDate == nil, getmetatable(b).__name, projects.get("nope")
            """)
        #expect(values == ["App", "float", #"["ios"]"#, 0, "queued", 0.0, true, "opsh.row", nil])
        #expect(test.failure("local b = builds.get('b1') return b.nmae")?.hasPrefix("test:1: no column 'nmae' in this row (columns: id, schemeId,") == true)
        // Generated ids, dates now.
        let created = try test.run("""
            local l = logs.insert{ buildId = "b1", content = "x" }
            return #l.id, os.time() - l.createdAt < 5, l.level, l.category
            """)
        #expect(created == [36, true, "info", "build"])
        #expect(try test.sqlText("SELECT count(*) FROM buildLogs") == "2")
    }

    @Test func listFiltersOrdersAndPages() throws {
        try loadFixture()
        try test.run("""
            for i = 3, 12 do
              builds.insert{ id = "b" .. i, schemeId = "s1", versionString = "2." .. i, buildNumber = i,
                             status = i % 2 == 0 and "failed" or "succeeded", createdAt = 1000 * i }
            end
            """)
        #expect(try test.run("local r = builds.list{ where = { status = 'running' } } return #r, r[1].id, getmetatable(r).__name")
            == [1, "b2", "opsh.rows"])
        #expect(try test.run("""
            local r = builds.list{ where = { status = {'failed', 'succeeded'} }, order = 'createdAt desc', limit = 3, offset = 1 }
            return r[1].id, r[2].id, r[3].id, #r
            """) == ["b11", "b10", "b9", 3])
        #expect(try test.run("return builds.count{ where = { createdAt = { ge = 5000, lt = 8000 } } }") == [3])
        #expect(try test.run("return builds.count{ where = { startDate = db.NULL } }, builds.count{ where = { startDate = { ne = db.NULL } } }") == [12, 0])
        #expect(try test.run("return builds.count(), builds.count{ where = { versionString = { like = '2.1%' } } }") == [12, 3])
        #expect(try test.run("local r = builds.list{ order = {'-buildNumber'}, limit = 1 } return r[1].buildNumber") == [12])
        // Specific listings.
        #expect(try test.run("local r = builds.latest('com.example.app', 2) return #r, r[1].id, r[2].id") == [2, "b12", "b11"])
        #expect(try test.run("local r = schemes.list('com.example.app') return #r, r[1].name") == [1, "Release"])
        #expect(try test.run("local r = schemes.list{ where = { name = 'nope' } } return #r, getmetatable(r).columns[1]") == [0, "id"])
    }

    @Test func updateUpsertAndCreate() throws {
        try loadFixture()
        #expect(try test.run("""
            local b = builds.update("b1", { status = "failed", exitCode = 2, endDate = 1500.5 })
            return b.status, b.exitCode, b.endDate, b.versionString
            """) == ["failed", 2, 1500.5, "1.0.0"])
        #expect(try test.sqlText("SELECT status, exitCode, endDate FROM builds WHERE id = 'b1'") == "failed|2|1500.5")
        // NULL through db.NULL.
        try test.run("builds.update('b1', { exitCode = db.NULL })")
        #expect(try test.sqlText("SELECT exitCode IS NULL FROM builds WHERE id = 'b1'") == "1")
        // upsert: updates the given fields of an existing row, keeps the rest…
        #expect(try test.run("local p = projects.upsert{ bundleIdentifier = 'com.example.app', displayName = 'The App' } return p.name, p.displayName")
            == ["App", "The App"])
        // …or inserts.
        try test.run("projects.upsert{ bundleIdentifier = 'org.other', name = 'Other', gitRepositoryURL = '/srv/other' }")
        #expect(try test.sqlText("SELECT group_concat(displayName, ',') FROM (SELECT displayName FROM projects ORDER BY bundleIdentifier)") == "The App,Other")
        // builds.create numbers builds per scheme.
        #expect(try test.run("local b = builds.create('s1', '3.0.0') return b.buildNumber, b.status, b.versionString") == [3, "queued", "3.0.0"])
        // updated_at moves on update.
        try test.run("models.update('m1', { updated_at = 5 })")
        #expect(try test.run("return models.get('m1').updated_at") == [5.0])
        #expect(try test.run("return os.time() - models.update('m1', { name = 'M2' }).updated_at < 5") == [true])
    }

    @Test func jsonColumnsTakeTablesOrTextAndComeBackAsText() throws {
        try loadFixture()
        try test.run("schemes.update('s1', { platforms = { 'ios', 'macos' } })")
        #expect(try test.sqlText("SELECT platforms FROM schemes") == #"["ios","macos"]"#)
        try test.run("schemes.update('s1', { platforms = '[\"tvos\"]' })")
        #expect(try test.run("return json.decode(schemes.get('s1').platforms)[1]") == ["tvos"])
        // Empty tables follow the column's default: [] for platforms.
        try test.run("schemes.update('s1', { platforms = {} })")
        #expect(try test.sqlText("SELECT platforms FROM schemes") == "[]")
        #expect(try test.run("return telemetry.list()[1].properties") == [#"{"build":42}"#])
    }

    @Test func deletesRefuseOrCascade() throws {
        try loadFixture()
        #expect(test.failure("builds.delete('b2')") == "test:1: build b2 is running; cancel it first")
        #expect(try test.run("return builds.delete('b1'), builds.delete('b1')") == [true, false])
        // The build's logs and crash logs went with it.
        #expect(try test.sqlText("SELECT (SELECT count(*) FROM buildLogs) + (SELECT count(*) FROM crashLogs)") == "0")
        #expect(test.failure("projects.delete('com.example.app')") ==
            "test:1: project com.example.app has 1 build(s); delete them first or pass cascade = true")
        #expect(try test.run("return projects.delete('com.example.app', { cascade = true })") == [true])
        #expect(try test.sqlText("SELECT (SELECT count(*) FROM projects) + (SELECT count(*) FROM schemes) + (SELECT count(*) FROM builds)") == "0")
        // A model with sessions: refused, then cascaded.
        #expect(test.failure("models.delete('m1')") == "test:1: model m1 has 1 session(s); delete them first or pass cascade = true")
        #expect(try test.run("return models.delete('m1', { cascade = true })") == [true])
        #expect(try test.sqlText("SELECT count(*) FROM generation_sessions") == "0")
    }

    @Test func schemeDeleteCascadesOnlyWhenAsked() throws {
        try loadFixture()
        try test.run("builds.update('b2', { status = 'failed' })")
        #expect(test.failure("schemes.delete('s1')") == "test:1: scheme s1 has 2 build(s); delete them first or pass cascade = true")
        #expect(try test.run("return schemes.delete('s1', { cascade = true })") == [true])
        #expect(try test.sqlText("SELECT count(*) FROM builds") == "0")
    }

    @Test func configAggregateRoundTrips() throws {
        try loadFixture()
        let values = try test.run("""
            local c = config.get()
            c.analytics.sampling_rate = 0.25
            c.storage.auto_cleanup = false
            c.routing_policies = {
              { id = "p1", name = "long prompts", priority = 10, execution_target = "cloud", conditions = { minTokens = 2048 } },
              { id = "p2", name = "default", conditions = {} },
            }
            local saved = config.save(c)
            local again = config.get()
            return again.base_url, again.api_key, again.analytics.sampling_rate, again.analytics.enabled,
                   again.storage.auto_cleanup, #again.routing_policies, again.routing_policies[1].name,
                   math.type(again.routing_policies[1].conditions.minTokens), json.encode(again.routing_policies[2].conditions),
                   saved.routing_policies[2].execution_target
            """)
        #expect(values == ["https://api.example.com", "sk-secret-0123456789", 0.25, true, false, 2, "long prompts", "integer", "{}", "onDevice"])
        #expect(try test.sqlText("SELECT conditions FROM routing_policies WHERE id = 'p1'") == #"{"minTokens":2048}"#)
        // Saving a list without p2 removes it; fields left out keep their values.
        try test.run("config.save{ routing_policies = { { id = 'p1', name = 'long prompts' } } }")
        #expect(try test.sqlText("SELECT group_concat(id) FROM routing_policies") == "p1")
        #expect(try test.sqlText("SELECT base_url, sampling_rate FROM configuration JOIN analytics_config ON configuration_id = id") == "https://api.example.com|0.25")
        #expect(try test.run("return config.get('nope')") == [nil])
    }

    @Test func modelsSessionsAndTelemetry() throws {
        try loadFixture()
        try test.run("models.recordUsage('m1', { tokens = 100, cost = 0.5, latencyMs = 20, at = 86400 * 3 })")
        try test.run("models.recordUsage('m1', { tokens = 50, at = 86400 * 3 + 10, failed = true })")
        #expect(try test.run("local u = models.usage('m1') return #u, u[1].day, u[1].total_tokens, u[1].generation_count, u[1].error_count")
            == [1, "1970-01-04", 150, 2, 1])
        #expect(try test.run("""
            sessions.addGeneration{ session_id = "g1", prompt_tokens = 20, completion_tokens = 80, cost = 0.25 }
            local g = sessions.addGeneration{ session_id = "g1", prompt_tokens = 1 }
            local s = sessions.get("g1")
            return g.sequence_number, #sessions.generations("g1"), s.total_tokens, s.total_cost
            """) == [2, 2, 101, 0.25])
        #expect(try test.run("""
            local rows = {}
            for i = 1, 1000 do rows[i] = { event = i % 3 == 0 and "tap" or "view", properties = { i = i }, created_at = i } end
            return telemetry.insertMany(rows)
            """) == [1000])
        #expect(try test.sqlText("SELECT count(*), sum(json_extract(properties, '$.i')) FROM telemetry WHERE event <> 'app.start'") == "1000|500500")
        #expect(try test.run("local c = telemetry.counts() return c[1].event, c[1].count, c[2].event, c[3].count") == ["view", 667, "tap", 1])
        #expect(try test.run("return telemetry.count{ where = { created_at = { le = 10 } } }") == [10])
    }

    @Test func writesInsideTransactionsRollBackTogether() throws {
        try loadFixture()
        let before = try dump()
        #expect(test.failure("""
            db.transaction(function()
              builds.update("b1", { status = "failed" })
              telemetry.insertMany{ { event = "x" } }
              error("abort")
            end)
            """) == "test:4: abort")
        #expect(try dump() == before)
        let (_, summary) = try test.session.database.dryRun {
            try test.run("builds.update('b1', { status = 'failed' }) telemetry.insertMany{ { event = 'x' }, { event = 'y' } }")
        }
        #expect(summary.tables["builds"]?.updated == 1)
        #expect(summary.tables["telemetry"]?.inserted == 2)
        #expect(try dump() == before)
    }

    /// The unchanged-database check below can fail: it sees a one-field change.
    @Test func fingerprintSeesAChange() throws {
        try loadFixture()
        let before = try dump()
        try test.run("builds.update('b1', { progress = 0.5 })")
        #expect(try dump() != before)
    }

    // MARK: Bad input

    /// Each case: Lua code and the exact message; the database must be
    /// unchanged afterwards.
    static let badInput: [(String, String)] = [
        // Wrong types.
        ("builds.get()", "test:1: bad argument #1 to 'get' (string expected, got no value)"),
        ("builds.get({})", "test:1: bad argument #1 to 'get' (string expected, got table)"),
        ("builds.insert('b9')", "test:1: bad argument #1 to 'insert' (table expected, got string)"),
        ("builds.update('b1', 'failed')", "test:1: bad argument #2 to 'update' (table expected, got string)"),
        ("builds.insert{ id = 'b9', schemeId = 's1', versionString = '1', buildNumber = 'x' }",
         "test:1: bad argument #1 to 'insert' (field 'buildNumber': number expected, got string)"),
        ("builds.update('b1', { buildNumber = 1.5 })", "test:1: bad argument #2 to 'update' (field 'buildNumber': number has no integer representation)"),
        ("builds.update('b1', { versionString = 2 })", "test:1: bad argument #2 to 'update' (field 'versionString': string expected, got number)"),
        ("builds.update('b1', { versionString = db.NULL })", "test:1: bad argument #2 to 'update' (field 'versionString': cannot be NULL (builds.versionString is NOT NULL))"),
        ("builds.update('b1', { [1] = 'x' })", "test:1: bad argument #2 to 'update' (field names must be strings, got a number key)"),
        ("telemetry.get('x')", "test:1: bad argument #1 to 'get' (number expected, got string)"),
        ("telemetry.insertMany{ { event = 'a' }, 'b' }", "test:1: bad argument #1 to 'insertMany' (element 2: table expected, got string)"),
        ("telemetry.insertMany{ { event = 'a' }, { properties = {} } }", "test:1: bad argument #1 to 'insertMany' (missing field '[2].event' (telemetry needs: event))"),
        ("config.save{ analytics = { enabled = 'yes' } }", "test:1: bad argument #1 to 'save' (field 'analytics.enabled': boolean expected, got string)"),
        ("models.recordUsage('m1', { tokens = 'many' })", "test:1: bad argument #2 to 'recordUsage' (tokens: number expected, got string)"),
        // Unknown fields and columns.
        ("builds.insert{ id = 'b9', schemeId = 's1', versionString = '1', buildNumber = 9, nmae = 'x' }",
         "test:1: unknown column 'nmae' in builds (columns: id, schemeId, versionString, buildNumber, status, createdAt, startDate, endDate, exitCode, progress, commitHash, runnerHost, runnerPid, runnerStartedAt, runnerId, heartbeatAt, heartbeatInterval, attempts)"),
        ("builds.list{ where = { stauts = 'running' } }",
         "test:1: unknown column 'stauts' in builds (columns: id, schemeId, versionString, buildNumber, status, createdAt, startDate, endDate, exitCode, progress, commitHash, runnerHost, runnerPid, runnerStartedAt, runnerId, heartbeatAt, heartbeatInterval, attempts)"),
        ("builds.list{ order = 'created desc' }",
         "test:1: unknown column 'created' in builds (columns: id, schemeId, versionString, buildNumber, status, createdAt, startDate, endDate, exitCode, progress, commitHash, runnerHost, runnerPid, runnerStartedAt, runnerId, heartbeatAt, heartbeatInterval, attempts)"),
        ("builds.list{ limt = 3 }", "test:1: bad argument #1 to 'list' (unknown option 'limt' (options: where, order, limit, offset))"),
        ("builds.list{ order = 'createdAt downwards' }", "test:1: bad argument #1 to 'list' (order: expected \"column\", \"column desc\" or \"-column\", got 'createdAt downwards')"),
        ("builds.list{ where = { createdAt = { gte = 1 } } }", "test:1: bad argument #1 to 'list' (where.createdAt: unknown operator 'gte' (operators: eq, ne, lt, le, gt, ge, like; an array means IN))"),
        ("builds.list{ limit = -1 }", "test:1: bad argument #1 to 'list' (limit: a whole number of 0 or more expected, got -1)"),
        ("builds.count{ limit = 1 }", "test:1: bad argument #1 to 'count' (unknown option 'limit' (options: where))"),
        ("telemetry.insertMany{ { event = 'a', sesion_id = 'x' } }",
         "test:1: unknown column '[1].sesion_id' in telemetry (columns: id, event, properties, session_id, created_at)"),
        ("config.save{ base_uri = 'x' }",
         "test:1: unknown column 'base_uri' in configuration (columns: id, api_key, base_url, model_cache_size, created_at, updated_at, routing_policies, analytics, storage)"),
        ("builds.delete('b1', { cascade = true })", "test:1: bad argument #2 to 'delete' (unknown option 'cascade' (options: none))"),
        // Invalid values and JSON.
        ("builds.update('b1', { status = 'exploded' })", "test:1: invalid value for builds.status: 'exploded' is not one of queued, running, succeeded, failed, cancelled"),
        ("builds.update('b1', { progress = 2 })", "test:1: invalid value for builds: CHECK constraint failed: progress BETWEEN 0 AND 1"),
        ("schemes.update('s1', { platforms = '[\"ios\",' })", "test:1: invalid value for schemes.platforms: not valid JSON: [\"ios\","),
        ("schemes.update('s1', { platforms = { print } })", "test:1: invalid value for schemes.platforms: cannot encode a function at $[1]"),
        ("schemes.update('s1', { platforms = 42 })", "test:1: bad argument #2 to 'update' (field 'platforms': table or JSON text expected, got number)"),
        ("telemetry.insert{ event = 'x', properties = '{oops}' }", "test:1: invalid value for telemetry.properties: not valid JSON: {oops}"),
        ("telemetry.insertMany{ { event = 'a' }, { event = 'b', properties = 'nope' } }", "test:1: invalid value for telemetry.properties: not valid JSON: nope"),
        ("config.save{ routing_policies = { { name = 'x', conditions = '[1' } } }", "test:1: invalid value for routing_policies.conditions: not valid JSON: [1"),
        ("config.save{ routing_policies = { { name = 'x', conditions = {1, 2} } } }", "test:1: invalid value for routing_policies.conditions: a JSON object expected, got [1,2]"),
        ("config.save{ routing_policies = { { name = 'x', execution_target = 'mars' } } }",
         "test:1: invalid value for routing_policies.execution_target: 'mars' is not one of onDevice, cloud, hybrid"),
        ("config.save{ id = 'new' }", "test:1: bad argument #1 to 'save' (missing field 'base_url' (a new configuration needs: base_url))"),
        // Missing rows and references.
        ("builds.update('nope', { status = 'failed' })", "test:1: no row in builds with key nope"),
        ("builds.create('nope', '1.0')", "test:1: no row in schemes with key nope"),
        ("builds.insert{ schemeId = 'nope', versionString = '1', buildNumber = 9 }", "test:1: no row in schemes with key nope (builds.schemeId refers to it)"),
        ("builds.insert{ schemeId = 's1', versionString = '1' }",
         "test:1: bad argument #1 to 'insert' (missing field 'buildNumber' (builds needs: schemeId, versionString, buildNumber))"),
        ("builds.insert{ id = 'b1', schemeId = 's1', versionString = '1', buildNumber = 7 }",
         "test:1: builds: a row with the same key exists (UNIQUE constraint failed: builds.id)"),
        ("builds.update('b1', { id = 'b7' })", "test:1: bad argument #2 to 'update' (field 'id' is the key of builds and cannot be changed by update)"),
        ("sessions.addGeneration{ session_id = 'nope' }", "test:1: no row in generation_sessions with key nope (generations.session_id refers to it)"),
        ("models.recordUsage('nope', { tokens = 1 })", "test:1: no row in model_metadata with key nope"),
        // Refused deletes.
        ("builds.delete('b2')", "test:1: build b2 is running; cancel it first"),
        ("projects.delete('com.example.app')", "test:1: project com.example.app has 2 build(s); delete them first or pass cascade = true"),
        ("projects.delete('com.example.app', { cascade = 'yes' })", "test:1: bad argument #2 to 'delete' (cascade: boolean expected, got string)"),
        ("models.delete('m1')", "test:1: model m1 has 1 session(s); delete them first or pass cascade = true"),
    ]

    @Test(arguments: badInput)
    func badInputIsRefusedAndChangesNothing(_ code: String, _ message: String) throws {
        try loadFixture()
        let before = try dump()
        #expect(test.failure(code) == message)
        #expect(try dump() == before)
    }
}

extension TestSession {
    /// The rows of a query as sqlite3 prints them (`a|b`, one line per
    /// row, NULL empty), read through the session's own read connection:
    /// Foundation's `Process.run()` crashes now and then on Linux
    /// (swift-corelibs-foundation#5472), so tests spawn sqlite3 only where
    /// a second process is the point.
    func sqlText(_ sql: String) throws -> String {
        let result = try run("""
            local rows = db.query(...)
            local columns = getmetatable(rows).columns
            local lines = {}
            for i, row in ipairs(rows) do
              local cells = {}
              for j, name in ipairs(columns) do
                local v = rawget(row, name)
                cells[j] = v == nil and "" or tostring(v)
              end
              lines[i] = table.concat(cells, "|")
            end
            return table.concat(lines, "\\n")
            """, [.string(sql)])
        return result.first?.stringValue ?? ""
    }

    /// Every row of every table, to tell whether anything changed.
    func databaseFingerprint() throws -> String {
        let result = try run("""
            local out = {}
            for _, t in ipairs(db.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")) do
              local rows = db.query('SELECT * FROM "' .. t.name .. '" ORDER BY rowid')
              out[#out + 1] = t.name .. " " .. #rows
              for _, row in ipairs(rows) do out[#out + 1] = json.encode(row) end
            end
            return table.concat(out, "\\n")
            """)
        return result.first?.stringValue ?? ""
    }
}
