import Foundation
import Testing

/// Bad input, as a table: the input, what opsh must say (exit status and a
/// piece of stderr), and what the database must look like after.
@Suite struct BadInputTests {
    struct Case: Sendable {
        var name: String
        var code: String
        var status: Int32
        var says: String
        /// SQL whose result must be `after` once the input was refused.
        var check: String = "SELECT count(*) FROM projects"
        var after: String = "1"
    }

    static let cases: [Case] = [
        Case(name: "Lua syntax error", code: "local x = = 1", status: 1, says: "unexpected symbol"),
        Case(name: "runtime error", code: "local t = nil; return t.x", status: 1, says: "attempt to index a nil value"),
        Case(name: "error inside a transaction rolls it back",
             code: #"db.transaction(function() projects.insert{ bundleIdentifier = "com.b", name = "B", gitRepositoryURL = "/b" } error("boom") end)"#,
             status: 1, says: "boom"),
        // A failing callback is reported and the script goes on (the watch stays).
        Case(name: "error inside a watch callback",
             code: #"db.exec("CREATE TABLE IF NOT EXISTS w (a)") watch("SELECT count(*) AS n FROM w", function() error("in callback") end) db.exec("INSERT INTO w VALUES (1)") opsh.wait(0.5)"#,
             status: 0, says: "watch callback failed: (command line):1: in callback"),
        Case(name: "wrong argument type", code: "db.query({})", status: 1, says: "bad argument #1"),
        Case(name: "unknown field", code: #"projects.insert{ bundleIdentifier = "com.c", name = "C", gitRepositoryURL = "/c", colour = "red" }"#,
             status: 1, says: "colour"),
        Case(name: "SQL error", code: "db.query('SELECT * FROM nope')", status: 1, says: "no such table: nope"),
        Case(name: "BEGIN through db.exec", code: "db.exec('BEGIN')", status: 1, says: "db.transaction"),
        Case(name: "SQL injection through a bound value",
             code: #"assert(#db.query("SELECT * FROM projects WHERE name = ?", "' OR '1'='1") == 0) "#
                + #"assert(db.exec("UPDATE projects SET name = ? WHERE bundleIdentifier = ?", "x'; DROP TABLE projects; --", "none' OR '1'='1") == 0) "#
                + #"assert(db.first("SELECT * FROM projects WHERE bundleIdentifier = :id", { id = "' OR 1=1 --" }) == nil) error("stop")"#,
             status: 1, says: "stop"),
        Case(name: "SQL injection through a repository filter",
             code: #"assert(projects.count{ where = { name = "App' OR '1'='1" } } == 0) assert(projects.get("com.example.app' --") == nil) error("stop")"#,
             status: 1, says: "stop"),
        Case(name: "malformed query key", code: #"query('project.com.example.app')"#, status: 1, says: "malformed query key"),
        Case(name: "hostile query key", code: #"query('project."x"; DROP TABLE projects; --')"#, status: 1, says: "malformed query key"),
        Case(name: "invalid JSON into a JSON column",
             code: #"schemes.insert{ projectBundleIdentifier = "com.example.app", name = "S", platforms = "[not json" }"#,
             status: 1, says: "JSON", check: "SELECT count(*) FROM schemes", after: "0"),
        Case(name: "invalid JSON through SQL", code: #"db.exec("INSERT INTO schemes (id, projectBundleIdentifier, name, platforms) VALUES ('s', 'com.example.app', 'S', '{')")"#,
             status: 1, says: "CHECK constraint failed", check: "SELECT count(*) FROM schemes", after: "0"),
        Case(name: "huge string round-trips", code: #"local s = string.rep("é\0", 4 << 20) db.exec("CREATE TABLE big (b)") db.exec("INSERT INTO big VALUES (?)", db.blob(s)) assert(db.value("SELECT b FROM big") == s) error("stop")"#,
             status: 1, says: "stop"),
        Case(name: "self-referencing table to a repository", code: #"local t = { "linux" } t[2] = t schemes.insert{ projectBundleIdentifier = "com.example.app", name = "S", platforms = t }"#,
             status: 1, says: "contains itself", check: "SELECT count(*) FROM schemes", after: "0"),
        Case(name: "self-referencing table to json.encode", code: "local t = {} t.self = t json.encode(t)", status: 1, says: "contains itself"),
        Case(name: "self-referencing table in the configuration", code: "local t = {} t.self = t config.save{ base_url = 'https://x', routing_policies = { { name = 'x', conditions = t } } }",
             status: 1, says: "contains itself", check: "SELECT count(*) FROM routing_policies", after: "0"),
        Case(name: "deep table to a binding", code: "local t = {} for i = 1, 100000 do t = {t} end json.encode(t)", status: 1, says: "nesting deeper than 200 levels"),
        Case(name: "endless recursion", code: "local function f() return 1 + f() end f()", status: 1, says: "stack overflow"),
    ]

    @Test func eachBadInputIsRefusedAndChangesNothing() throws {
        let scratch = try Scratch()
        let created = try scratch.opsh(["-e", #"projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }"#])
        #expect(created.status == 0, "\(created.stderr)")
        var handled = 0
        var integrityAnswers: Set<String> = []
        for item in Self.cases {
            let result = try scratch.opsh(["--timeout", "20", "-e", item.code])
            let after = try scratch.sqlite(item.check)
            let integrity = try scratch.sqlite("PRAGMA integrity_check")
            integrityAnswers.insert(integrity)
            let ok = result.status == item.status && result.stderr.contains(item.says) && after == item.after && integrity == "ok"
            #expect(ok, "\(item.name): status \(result.status) (want \(item.status)), stderr \(result.stderr.prefix(400)) (want '\(item.says)'), \(item.check) = \(after) (want \(item.after))")
            if ok { handled += 1 }
        }
        #expect(try scratch.sqlite("SELECT name FROM projects") == "App")
        reportFigure("bad input (Lua and SQL): \(handled)/\(Self.cases.count) inputs answered with the expected status and message, the data they targeted unchanged, integrity_check after each: \(integrityAnswers.sorted().joined(separator: " | "))")
    }

    /// Files that are not a usable database: exit 3, and the file is left untouched.
    @Test func badDatabaseFilesAreRefusedUntouched() throws {
        let scratch = try Scratch()
        let good = try scratch.opsh(["-e", #"projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }"#])
        #expect(good.status == 0, "\(good.stderr)")
        _ = try scratch.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
        let database = fileBytes(scratch.database) ?? Data()
        var files: [(String, Data)] = [
            ("not a database", Data(String(repeating: "hello, this is not SQLite\n", count: 400).utf8)),
            ("truncated database", database.prefix(database.count / 2)),
            ("database header only", database.prefix(100)),
        ]
        // A database migrated by a newer opsh (a migration this one does not know).
        let newer = scratch.root + "/newer.sqlite"
        try database.write(to: URL(fileURLWithPath: newer))
        _ = try scratch.sqlite("INSERT INTO grdb_migrations (identifier) VALUES ('999_from_the_future')", file: newer)
        files.append(("database from a newer opsh", fileBytes(newer) ?? Data()))
        var handled = 0
        for (index, (name, bytes)) in files.enumerated() {
            let path = scratch.root + "/bad-\(index).sqlite"
            try bytes.write(to: URL(fileURLWithPath: path))
            let result = try scratch.run(opshExecutable, ["--db", path, "-e", "return db.value('SELECT count(*) FROM projects')"])
            let untouched = fileBytes(path) == bytes
            let ok = result.status == 3 && untouched && !result.stderr.isEmpty
            #expect(ok, "\(name): status \(result.status) (want 3), untouched \(untouched), stderr \(result.stderr)")
            if ok { handled += 1 }
        }
        reportFigure("bad database files: \(handled)/\(files.count) refused with exit 3 and left byte-identical")
    }
}
