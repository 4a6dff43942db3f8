import Foundation
import Testing
import LuaRuntime
import Store
@testable import Bindings

/// `key` and `query`: the key builder, textual keys, fetching.
@Suite struct QueryKeyModuleTests {
    let test = try! TestSession()

    /// Two projects, schemes, builds of versions with dots, logs.
    func seed() throws {
        _ = try test.sqlite3("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', 'git@x:app.git', 1);
            INSERT INTO projects VALUES ('a"b', 'quoted', 'Quoted', 'git@x:q.git', 2);
            INSERT INTO schemes (id, projectBundleIdentifier, name, "order") VALUES ('s1', 'com.example.app', 'Release', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name, "order") VALUES ('s.2', 'com.example.app', 'Debug', 1);
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES
              ('b1', 's1', '1.2.0', 1, 'succeeded', 10),
              ('b2', 's1', '1.2.0', 2, 'failed', 20),
              ('b3', 's.2', '1.3.0', 3, 'running', 30);
            INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES
              ('l1', 'b3', 'info', 'build', 'compiling', 1),
              ('l2', 'b3', 'debug', 'build', 'details', 2),
              ('l3', 'b3', 'info', 'unit tests', 'testing', 3);
            INSERT INTO telemetry (event, created_at) VALUES ('open', 1), ('open', 2), ('crash', 3);
            """)
    }

    /// Builder expressions and the canonical text they print as.
    static let builderCases: [(String, String)] = [
        ("key.projects.all.ids", "projects.all.ids"),
        ("key.projects.versionStrings", "projects.versionStrings"),
        ("key.project('com.example.app')", #"project."com.example.app""#),
        ("key.project('com.example.app').detail", #"project."com.example.app".detail"#),
        ("key.project('com.example.app').schemes.ids", #"project."com.example.app".schemes.ids"#),
        ("key.project('com.example.app').buildVersionStrings", #"project."com.example.app".buildVersionStrings"#),
        ("key.project('com.example.app').latestBuilds(3)", #"project."com.example.app".latestBuilds.limit3"#),
        ("key.project('a\"b')", #"project."a""b""#),
        ("key.scheme('s1')", "scheme.s1"),
        ("key.schemes{'s1', 's.2'}.builds.ids", #"schemes.s1,"s.2".builds.ids"#),
        ("key.schemes('s1', 's.2').builds.ids('1.2.0')", #"schemes.s1,"s.2".builds.ids."1.2.0""#),
        ("key.build('b1')", "build.b1"),
        ("key.build(42)", "build.42"),
        ("key.build('b1').logs{}", "build.b1.logs.ids"),
        ("key.build('b1').logs.ids", "build.b1.logs.ids"),
        ("key.build('b1').logs{ debug = true, category = 'build' }", "build.b1.logs.ids.debug.categorybuild"),
        ("key.build('b1').logs.ids.debug.category('unit tests')", #"build.b1.logs.ids.debug.category"unit tests""#),
        ("key.build('b1').logs{ category = 'a.b' }", #"build.b1.logs.ids.category"a.b""#),
        ("key.build('b1').crashLogs.ids", "build.b1.crashLogs.ids"),
        ("key.buildLog('l1')", "buildLog.l1"),
        ("key.crashLog('x\"y')", #"crashLog."x""y""#),
        ("key.models.all.ids", "models.all.ids"),
        ("key.model('gpt-4.1')", #"model."gpt-4.1""#),
        ("key.model('gpt-4.1').usage", #"model."gpt-4.1".usage"#),
        ("key.session('s')", "session.s"),
        ("key.session('s').generations", "session.s.generations"),
        ("key.telemetry.counts", "telemetry.counts"),
        ("key.config", "config"),
        ("key.config('eu.west')", #"config."eu.west""#),
    ]

    @Test(arguments: builderCases)
    func builderPrintsCanonicalTextThatRoundTrips(expression: String, text: String) throws {
        let results = try test.run("""
            local k = \(expression)
            local parsed = key.parse(tostring(k))
            return tostring(k), tostring(parsed), parsed == k, 'k: ' .. k
            """)
        #expect(results == [.string(text), .string(text), true, .string("k: " + text)])
        #expect(try QueryKey(parsing: text).description == text)
    }

    /// A key of a root word and its id (`key.build(id)`) is a key object
    /// without a finaliser (IdKeys: Lua's collector running one per key
    /// was most of `query(key.build(id))`'s own cost); a key it leads to
    /// (`.logs`) holds its node and has one. Both are "opsh.key", equal to
    /// the parsed key, and still work after a collection that freed
    /// thousands of their kind; a userdata of another kind is no key. An
    /// id that is not ASCII takes the function's Swift body (its C path
    /// takes ASCII only), which checks it is UTF-8.
    @Test func aKeyOfARootAndAnIdHasNoFinaliser() throws {
        try seed()
        let results = try test.run("""
            local k = key.build('b1')
            for i = 1, 5000 do local _ = key.build('b' .. i) end
            collectgarbage()
            local logs = k.logs
            return getmetatable(k).__gc == nil, getmetatable(logs).__gc ~= nil,
                   getmetatable(k).__name, getmetatable(logs).__name,
                   k == key.parse('build.b1'), key.parse('build.b1') == k, k == key.build('b1'), k == key.build('b2'),
                   tostring(k), tostring(key.build(12)), query(k).status, tostring(logs.ids), #query(key.build('b3').logs.ids),
                   select(2, pcall(query, io.stdout)),
                   key.build('bé') == key.parse(tostring(key.build('bé'))), select(2, pcall(key.build, '\\255'))
            """)
        #expect(results == [true, true, "opsh.key", "opsh.key", true, true, true, false,
                            "build.b1", "build.12", "succeeded", "build.b1.logs.ids", 2,
                            "bad argument #1 to 'query' (opsh.key expected, got FILE*)",
                            true, "bad argument #1 to 'build' (string is not valid UTF-8 (byte 1: 0xFF))"])
    }

    @Test func differentKeysAreNotEqual() throws {
        #expect(try test.run("return key.build('a') == key.build('b'), key.build('a') == key.parse('build.a')") == [false, true])
    }

    @Test func queryFetchesSeededValues() throws {
        try seed()
        // Rows: the row metatable, NULL columns absent, typos raise.
        let latest = try test.run("""
            local rows = query(key.project('com.example.app').latestBuilds(2))
            return #rows, rows[1].id, rows[2].id, rows[1].status, rows[1].endDate == nil, getmetatable(rows).__name, getmetatable(rows[1]).__name
            """)
        #expect(latest == [2, "b3", "b2", "running", true, "opsh.rows", "opsh.row"])
        #expect(test.failure("return query(key.build('b1')).stauts")?.hasPrefix("test:1: no column 'stauts' in this row (columns: id, schemeId,") == true)
        // Textual keys, with quoted ids.
        #expect(try test.run(#"return query('project."com.example.app".latestBuilds.limit5')[3].id"#) == ["b1"])
        #expect(try test.run(#"return query('project."a""b"').name"#) == ["quoted"])
        // Id lists are plain arrays.
        #expect(try test.run("return query(key.projects.all.ids)") == [.array(["a\"b", "com.example.app"])])
        #expect(try test.run("return query(key.schemes{'s1', 's.2'}.builds.ids('1.2.0'))") == [.array(["b2", "b1"])])
        #expect(try test.run("return query(key.project('com.example.app').schemes.ids)") == [.array(["s1", "s.2"])])
        #expect(try test.run("return query(key.build('b3').logs.ids)") == [.array(["l1", "l3"])])
        #expect(try test.run("return query(key.build('b3').logs{ debug = true, category = 'build' })") == [.array(["l1", "l2"])])
        #expect(try test.run("return query(key.build('b3').logs{ category = 'unit tests' })") == [.array(["l3"])])
        // Objects are tables; nested rows are rows.
        #expect(try test.run("return query(key.telemetry.counts)") == [["crash": 1, "open": 2]])
        #expect(try test.run("local d = query(key.project('com.example.app').detail) return d.project.name, d.schemeIds, d.recentBuildIds[1], getmetatable(d.project).__name")
            == ["app", .array(["s1", "s.2"]), "b3", "opsh.row"])
        #expect(try test.run("return query(key.projects.versionStrings)") == [["com.example.app": ["1.2.0", "1.3.0"]]])
        // Missing: nil.
        #expect(try test.run("return query(key.build('nope')), #query(key.model('m').usage)") == [nil, 0])
        #expect(try test.run("return query(key.project('nope').detail), query(key.config('nope'))") == [nil, nil])
    }

    /// `config.{id}` is the configuration's row with its parts after its
    /// columns (analytics, storage, the policies), as `fetch` makes it for
    /// Swift: printers list them in that order, and a part that is missing
    /// reads as nil.
    @Test func theConfigurationKeyIsItsRowWithItsParts() throws {
        try test.run("""
            config.save{ base_url = "https://api.example.com",
                         routing_policies = { { id = 'p1', name = 'long prompts', priority = 2 }, { id = 'p2', name = 'cheap', priority = 5 } } }
            """)
        let found = try test.run("""
            local c = query(key.config)
            local columns = getmetatable(c).columns
            return c.base_url, type(c.analytics), #c.routing_policies, c.routing_policies[1].id,
              getmetatable(c.routing_policies).__name, columns[#columns - 2], columns[#columns - 1], columns[#columns]
            """)
        #expect(found == ["https://api.example.com", "table", 2, "p2", "opsh.rows", "analytics", "storage", "routing_policies"])
        let swift = try test.store.client.read { db in try QueryKey.configuration("default").fetch(db) }
        #expect(swift["routing_policies"]?.arrayValue?.count == 2)
        #expect(swift["analytics"] != nil)
    }

    @Test func queryInsideATransactionSeesItsOwnWrites() throws {
        try seed()
        let results = try test.run("""
            return db.transaction(function()
              db.exec("UPDATE builds SET status = 'cancelled' WHERE id = 'b3'")
              return query(key.build('b3')).status
            end)
            """)
        #expect(results == ["cancelled"])
    }

    /// Bad keys and bad builder arguments, with their exact messages.
    static let badInput: [(String, String)] = [
        ("query('project.com.example.app')",
         #"test:1: malformed query key 'project.com.example.app' at position 13: expected one of 'detail', 'schemes', 'buildVersionStrings', 'latestBuilds', found 'example' (quote an id that holds '.', e.g. project."com.example.app")"#),
        ("key.parse('projects.all')",
         "test:1: malformed query key 'projects.all' at position 13: expected '.' and 'ids' after the end of the key"),
        (#"query('project."abc')"#,
         #"test:1: malformed query key 'project."abc' at position 9: expected a closing '"' for the quote opened here"#),
        ("query('')", "test:1: malformed query key '' at position 1: expected a key such as projects.all.ids"),
        ("query(42)", "test:1: bad argument #1 to 'query' (query key expected, got number)"),
        ("query()", "test:1: bad argument #1 to 'query' (query key expected, got no value)"),
        ("query(key.project('x').latestBuilds)",
         "test:1: incomplete query key 'project.x.latestBuilds': add (n), e.g. latestBuilds(5)"),
        ("query(key.projects)", "test:1: incomplete query key 'projects': add .all or .versionStrings"),
        ("return key.project('x').detial",
         "test:1: no 'detial' after key project.x (expected 'detail', 'schemes', 'buildVersionStrings', 'latestBuilds')"),
        ("return key.scheme('s').builds", "test:1: no 'builds' after key scheme.s (it is a complete key)"),
        ("return key.project('x').detail()", "test:1: key project.x.detail cannot be called (remove the parentheses)"),
        ("return key.project('x').latestBuilds(0)",
         "test:1: bad argument #1 to 'latestBuilds' (a whole number from 1 to 1000000 expected)"),
        ("return key.project('x').latestBuilds('3')", "test:1: bad argument #1 to 'latestBuilds' (number expected, got string)"),
        ("return key.project()", "test:1: bad argument #1 to 'project' (string expected, got no value)"),
        ("return key.project({})", "test:1: bad argument #1 to 'project' (string expected, got table)"),
        ("return key.schemes{}", "test:1: bad argument #1 to 'schemes' (at least one scheme id expected)"),
        ("return key.schemes{'a', true}", "test:1: bad argument #1 to 'schemes' (scheme id #2 is a boolean, not a string)"),
        ("return key.build('b').logs{ debg = true }",
         "test:1: bad argument #1 to 'logs' (unknown field 'debg' (expected debug, category))"),
        ("return key.build('b').logs{ debug = 1 }", "test:1: bad argument #1 to 'logs' ('debug' must be a boolean, got number)"),
        ("return key.schemes('a').builds.ids(nil)", "test:1: bad argument #1 to 'ids' (string expected, got nil)"),
        ("return key.projet('x')",
         "test:1: no 'projet' in key (key has: projects, project, scheme, schemes, build, buildLog, crashLog, models, model, session, telemetry, config, parse)"),
    ]

    @Test(arguments: badInput)
    func badInputIsRefusedWithItsMessage(code: String, message: String) throws {
        #expect(test.failure(code) == message)
    }

    /// A parsed key stands where the builder would have reached it.
    @Test func aParsedKeyContinuesLikeABuiltOne() throws {
        #expect(try test.run("""
            return tostring(key.parse('build.b1').logs.ids.debug), tostring(key.parse('project."a.b"').latestBuilds(2)),
                   tostring(key.parse('build.b1.logs.ids').category('unit tests')), tostring(key.parse('config')('eu'))
            """) == ["build.b1.logs.ids.debug", #"project."a.b".latestBuilds.limit2"#, #"build.b1.logs.ids.category"unit tests""#, "config.eu"])
        #expect(test.failure("return key.parse('scheme.s').builds") == "test:1: no 'builds' after key scheme.s (it is a complete key)")
    }

    @Test func incompleteKeysPrintWhatTheyLack() throws {
        #expect(try test.run("return tostring(key.project('x').latestBuilds)") == ["<incomplete key project.x.latestBuilds: add (n), e.g. latestBuilds(5)>"])
    }
}
