import Foundation
import Testing
import LuaRuntime
@testable import Bindings

/// `export.project`, `export.model`, `import`: from one session's database
/// to another's, files, options, errors in Lua's wording.
@Suite struct TransferModuleTests {
    let source = try! TestSession()
    let target = try! TestSession()

    static let seed = """
        projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/repos/app", createdAt = 1700000000.25 }
        schemes.insert{ id = "s1", projectBundleIdentifier = "com.example.app", name = "Release", buildCommand = "make", platforms = {"linux"} }
        local b = builds.insert{ id = "b1", schemeId = "s1", versionString = "1.0.0", buildNumber = 1, createdAt = 1700000001 }
        builds.insert{ id = "b2", schemeId = "s1", versionString = "1.1.0", buildNumber = 2, status = "failed", exitCode = 1, createdAt = 1700000002.5 }
        for i = 1, 3 do logs.insert{ id = "l" .. i, buildId = "b2", content = "line " .. i, createdAt = 1700000003 } end
        crashes.insert{ incidentIdentifier = "c1", buildId = "b2", content = "boom", signal = 6, createdAt = 1700000004 }
        models.insert{ id = "m1", name = "Llama", format = "gguf", framework = "llama.cpp", capabilities = {"chat"} }
        db.exec("INSERT INTO model_usage_stats (model_id, day, total_tokens) VALUES ('m1', '2024-05-01', 10), ('m1', '2024-05-02', 20)")
        """

    func rows(_ session: TestSession, _ table: String) throws -> String {
        try session.run("return json.encode(db.query('SELECT * FROM \(table) ORDER BY rowid'))").first?.stringValue ?? ""
    }

    static let tables = ["projects", "schemes", "builds", "buildLogs", "crashLogs", "model_metadata", "model_usage_stats"]

    @Test func exportThenImportIntoAnotherDatabase() throws {
        try source.run(Self.seed)
        let exported = try source.run("""
            local text, counts = export.project("com.example.app")
            return text, counts.projects, counts.schemes, counts.builds, counts.buildLogs, counts.crashLogs
            """)
        #expect(exported.dropFirst().map { $0 } == [1, 1, 2, 3, 1].map { LuaValue.integer($0) })
        let text = exported[0]
        let imported = try target.run("""
            local counts, replaced = import(...)
            return counts.projects, counts.schemes, counts.builds, counts.buildLogs, counts.crashLogs, replaced.builds
            """, [text])
        #expect(imported == [1, 1, 2, 3, 1, 0].map { LuaValue.integer($0) })
        let model = try source.run("return export.model('m1')").first!
        #expect(try target.run("local c = import(...) return c.model_metadata, c.model_usage_stats", [model]) == [1, 2])
        for table in Self.tables {
            #expect(try rows(target, table) == rows(source, table), "\(table)")
        }
        // The copy exports the same text.
        #expect(try target.run("return (export.project('com.example.app'))").first == text)
    }

    @Test func filesAndOptions() throws {
        try source.run(Self.seed)
        let file = source.folder.appendingPathComponent("app.json").path
        let result = try source.run("return export.project('com.example.app', { file = ..., logs = false })", [.string(file)])
        #expect(result.first == .string(file))
        #expect(FileManager.default.fileExists(atPath: file))
        let counts = try target.run("local c = import{ file = ... } return c.builds, c.buildLogs, c.crashLogs", [.string(file)])
        #expect(counts == [2, 0, 0])
        // Again: every row exists.
        #expect(target.failure("import{ file = ... }".replacingOccurrences(of: "...", with: "'\(file)'"))
            == "test:1: import refused: 4 row(s) already exist (projects \"com.example.app\", schemes \"s1\", builds \"b1\", builds \"b2\"); nothing was written; import with replace = true to overwrite them")
        try target.run("builds.update('b2', { status = 'succeeded' })")
        let replaced = try target.run("local c, r = import({ file = ..., replace = true }) return c.builds, r.builds, builds.get('b2').status", [.string(file)])
        #expect(replaced == [2, 2, "failed"])
    }

    @Test func aBadRowInTheMiddleWritesNothing() throws {
        try source.run(Self.seed)
        let text = try source.run("return (export.project('com.example.app'))").first!.stringValue!
        // The second build's scheme is not in the document; the rows before it are valid.
        let damaged = text.replacingOccurrences(of: "\"schemeId\": \"s1\", \"versionString\": \"1.1.0\"",
                                                with: "\"schemeId\": \"s9\", \"versionString\": \"1.1.0\"")
        #expect(damaged != text)
        let message = try target.run("local ok, err = pcall(import, ...) return err", [.string(damaged)]).first
        #expect(message == "bad argument #1 to 'import' (builds[2]: schemeId \"s9\" is not a row of schemes in the document)")
        for table in Self.tables { #expect(try rows(target, table) == "[]", "\(table)") }
        // A row SQLite refuses (a CHECK) after valid ones: rolled back, also inside db.transaction.
        let refused = text.replacingOccurrences(of: "\"content\": \"line 3\"", with: "\"content\": \"line 3\"")
            .replacingOccurrences(of: "\"buildNumber\": 2", with: "\"buildNumber\": 0")
        #expect(target.failure("import(...)".replacingOccurrences(of: "...", with: "[==[\(refused)]==]"))?.contains("CHECK constraint failed") == true)
        let inside = try target.run("""
            local document = ...
            local ok = pcall(db.transaction, function()
              projects.insert{ bundleIdentifier = "before", name = "B", gitRepositoryURL = "/b" }
              import(document)
            end)
            return ok, projects.count()
            """, [.string(refused)])
        #expect(inside == [false, 0])
        for table in Self.tables { #expect(try rows(target, table) == "[]", "\(table)") }
    }

    static let badArguments: [(String, String)] = [
        ("import()", "test:1: bad argument #1 to 'import' (string expected, got no value)"),
        ("import(42)", "test:1: bad argument #1 to 'import' (string expected, got number)"),
        ("import('{')", "test:1: bad argument #1 to 'import' (not valid JSON at line 1, column 2: expected a string key, found end of text)"),
        ("import('{\"format\": \"opsh-export\", \"version\": 9}')", "test:1: bad argument #1 to 'import' (unsupported export version 9 (this opsh reads version 1))"),
        ("import('{}', { replace = 1 })", "test:1: bad argument #2 to 'import' (replace: boolean expected, got number)"),
        ("import('{}', { force = true })", "test:1: bad argument #2 to 'import' (unknown option 'force' (options: replace))"),
        ("import{ replace = true }", "test:1: bad argument #1 to 'import' (file: a path expected, got nil)"),
        ("import{ file = '/nonexistent/x.json' }", "test:1: import: cannot read /nonexistent/x.json"),
        ("export.project()", "test:1: bad argument #1 to 'project' (string expected, got no value)"),
        ("export.project('nope')", "test:1: no row in projects with key nope"),
        ("export.project('nope', { logs = 'no' })", "test:1: bad argument #2 to 'project' (logs: boolean expected, got string)"),
        ("export.project('nope', { format = 'csv' })", "test:1: bad argument #2 to 'project' (unknown option 'format' (options: file, logs, overwrite))"),
        ("export.model('m', { logs = false })", "test:1: bad argument #2 to 'model' (unknown option 'logs' (options: file, overwrite))"),
        ("export.model('m', { file = '' })", "test:1: bad argument #2 to 'model' (file: a path expected, got string)"),
    ]

    @Test(arguments: badArguments)
    func badArgumentsAreRefused(_ code: String, _ message: String) {
        #expect(target.failure(code) == message)
    }

    @Test func helpDescribesTheFunctions() throws {
        for name in ["export.project", "export.model", "import"] {
            #expect(try target.run("return type(\(name))") == ["function"])
        }
        let text = try target.run("""
            local out = {} local saved = print print = function(s) out[#out + 1] = s end
            help("export.project") help("import") print = saved return table.concat(out, "\\n")
            """).first?.stringValue ?? ""
        #expect(text.hasPrefix("export.project(id [, {logs=bool, file=path, overwrite=bool}])"))
        #expect(text.contains("import(jsonText | {file=} [, {replace=bool}])"))
    }
}
