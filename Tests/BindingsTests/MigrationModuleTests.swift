import Foundation
import Testing
import LuaRuntime
import Store
@testable import Bindings

/// `migrate`: status, built-in and Lua migrations, refusals.
@Suite struct MigrationModuleTests {
    let test = try! TestSession()
    var folder: String { test.folder.appendingPathComponent("migrations").path }

    init() throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    func write(_ name: String, _ text: String) throws {
        try text.write(toFile: folder + "/" + name, atomically: true, encoding: .utf8)
    }

    func path(_ name: String) -> String { folder + "/" + name }

    /// A file name as Lua's messages show it (`luaO_chunkid`: at most 59
    /// characters, else "..." and the last 56).
    func short(_ path: String) -> String {
        path.utf8.count + 1 <= 60 ? path : "..." + String(path.suffix(56))
    }

    /// The two migrations most tests use: the second needs the first.
    func writeOwnerMigrations() throws {
        try write("001_owner.lua", """
            return {
              id = "001_owner",
              up = function(db)
                db.exec("ALTER TABLE projects ADD COLUMN owner TEXT")
              end,
            }
            """)
        try write("002_fill.lua", """
            return { id = "002_fill", up = function(db)
              db.exec("INSERT INTO projects VALUES ('p', 'p', 'P', 'git@x:p.git', 1, 'ops')")
            end }
            """)
    }

    /// What the database holds of migrations and schema, to compare.
    func snapshot() throws -> String {
        try test.sqlite3("""
            SELECT group_concat(identifier, ',') FROM (SELECT identifier FROM grdb_migrations ORDER BY rowid);
            SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master ORDER BY name);
            SELECT count(*) FROM projects;
            """)
    }

    func applied() throws -> String {
        try test.sqlite3("SELECT group_concat(identifier, ',') FROM (SELECT identifier FROM grdb_migrations ORDER BY rowid)")
    }

    func status(_ argument: String = "") throws -> String {
        let result = try test.run("""
            local lines = {}
            for _, m in ipairs(migrate.status(\(argument))) do lines[#lines + 1] = m.id .. ' ' .. m.kind .. ' ' .. m.state end
            return table.concat(lines, '; ')
            """)
        return result.first?.stringValue ?? ""
    }

    @Test func statusOfAFreshDatabase() throws {
        #expect(try status() == "001_initialSchema builtin applied; 002_indexes builtin applied; 003_audit builtin applied; 004_runners builtin applied; 005_auditChain builtin applied; 006_schemeEnvironment builtin applied; 007_runnerRegistry builtin applied; 008_pinnedFunctions builtin applied")
        #expect(try test.run("return getmetatable(migrate.status()).__name, migrate.up()") == ["opsh.rows", .table([:])])
        // With a folder: its migrations are pending.
        try writeOwnerMigrations()
        #expect(try status("{ folder = '\(folder)' }")
            == "001_initialSchema builtin applied; 002_indexes builtin applied; 003_audit builtin applied; 004_runners builtin applied; 005_auditChain builtin applied; 006_schemeEnvironment builtin applied; 007_runnerRegistry builtin applied; 008_pinnedFunctions builtin applied; 001_owner lua pending; 002_fill lua pending")
    }

    @Test func luaMigrationsApplyInOrderAndAreRecorded() throws {
        // File names do not decide the order: ids do.
        try write("a.lua", #"return { id = "002_second", up = function(db) db.exec("INSERT INTO log VALUES ('second')") end }"#)
        try write("b.lua", #"return { id = "001_first", up = function(db) db.exec("CREATE TABLE log (step TEXT)") db.exec("INSERT INTO log VALUES ('first')") end }"#)
        try write("notes.txt", "not a migration")
        #expect(try test.run("return migrate.up{ folder = '\(folder)' }") == [["001_first", "002_second"]])
        #expect(try test.sqlite3("SELECT group_concat(step) FROM log") == "first,second")
        #expect(try applied() == "001_initialSchema,002_indexes,003_audit,004_runners,005_auditChain,006_schemeEnvironment,007_runnerRegistry,008_pinnedFunctions,lua:001_first,lua:002_second")
        let checksum = ExternalMigrations.checksum([UInt8](try Data(contentsOf: URL(fileURLWithPath: path("a.lua")))))
        #expect(try test.sqlite3("SELECT checksum FROM opsh_lua_migrations WHERE identifier = 'lua:002_second'") == checksum)
        #expect(try status("{ folder = '\(folder)' }")
            == "001_initialSchema builtin applied; 002_indexes builtin applied; 003_audit builtin applied; 004_runners builtin applied; 005_auditChain builtin applied; 006_schemeEnvironment builtin applied; 007_runnerRegistry builtin applied; 008_pinnedFunctions builtin applied; 001_first lua applied; 002_second lua applied")
        // The built-in migrations first, then the folder's in id order:
        // 001_first (in b.lua), then 002_second (in a.lua).
        #expect(try test.run("local s = migrate.status{ folder = '\(folder)' } return s[#s - 1].file") == [.string(path("b.lua"))])

        // Again: nothing to do, nothing changes.
        let before = try snapshot()
        #expect(try test.run("return migrate.up{ folder = '\(folder)' }") == [.table([:])])
        #expect(try snapshot() == before)
        // The database still opens (lua: migrations are not "from a newer opsh").
        _ = try Store.open(path: test.path)
    }

    @Test func upToATargetThenTheRest() throws {
        try writeOwnerMigrations()
        try test.run("migrate.folder('\(folder)')")
        #expect(try test.run("return migrate.up('001_owner')") == [["001_owner"]])
        #expect(try applied() == "001_initialSchema,002_indexes,003_audit,004_runners,005_auditChain,006_schemeEnvironment,007_runnerRegistry,008_pinnedFunctions,lua:001_owner")
        #expect(try test.run("return migrate.up('lua:001_owner')") == [.table([:])])
        #expect(test.failure("migrate.up('002_indexes')")
            == "test:1: migration '002_indexes' is older than '001_owner', which is applied: migrations only go up")
        #expect(try test.run("return migrate.up()") == [["002_fill"]])
        #expect(try test.sqlite3("SELECT owner FROM projects") == "ops")
    }

    @Test func aFailingMigrationIsRolledBackAndReported() throws {
        try writeOwnerMigrations()
        try write("003_bad.lua", """
            return { id = "003_bad", up = function(db)
              db.exec("CREATE TABLE half_done (x)")
              error("cannot go on")
            end }
            """)
        try write("004_after.lua", #"return { id = "004_after", up = function(db) db.exec("CREATE TABLE after (x)") end }"#)
        let message = test.failure("""
            local ok = true
            migrate.up{ folder = '\(folder)' }
            """)
        #expect(message == "test:2: migration '003_bad' failed and was rolled back: \(short(path("003_bad.lua"))):3: cannot go on")
        // The ones before it stay applied, it and the ones after are not.
        #expect(try applied() == "001_initialSchema,002_indexes,003_audit,004_runners,005_auditChain,006_schemeEnvironment,007_runnerRegistry,008_pinnedFunctions,lua:001_owner,lua:002_fill")
        #expect(try test.sqlite3("SELECT count(*) FROM sqlite_master WHERE name IN ('half_done', 'after')") == "0")
        #expect(try status("{ folder = '\(folder)' }").hasSuffix("003_bad lua pending; 004_after lua pending"))
        // An SQL error inside a migration, with the line of the db.exec.
        try write("003_bad.lua", """
            return { id = "003_bad", up = function(db)
              db.exec("INSERT INTO nowhere VALUES (1)")
            end }
            """)
        let sqlFailure = test.failure("migrate.up{ folder = '\(folder)' }")
        #expect(sqlFailure?.hasPrefix("test:1: migration '003_bad' failed and was rolled back: \(short(path("003_bad.lua"))):2: SQL error: no such table: nowhere") == true,
                "\(sqlFailure ?? "")")
    }

    @Test func aForeignKeyViolationRollsTheMigrationBack() throws {
        // Migrations run with foreign keys checked at their end (GRDB's
        // deferred checks), so a migration may reshape tables.
        try write("001_orphan.lua", """
            return { id = "001_orphan", up = function(db)
              db.exec("INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s', 'no.such.project', 'x')")
            end }
            """)
        let before = try snapshot()
        let message = test.failure("migrate.up{ folder = '\(folder)' }")
        #expect(message?.hasPrefix("test:1: migration '001_orphan' failed and was rolled back: FOREIGN KEY constraint violation - from schemes(projectBundleIdentifier) to projects(bundleIdentifier)") == true,
                "\(message ?? "")")
        #expect(try snapshot() == before)
        #expect(try test.sqlite3("SELECT count(*) FROM schemes") == "0")
    }

    @Test func aChangedFileIsRefused() throws {
        try writeOwnerMigrations()
        try test.run("migrate.up{ folder = '\(folder)' }")
        try write("001_owner.lua", """
            return {
              id = "001_owner",
              up = function(db)
                db.exec("ALTER TABLE projects ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
              end,
            }
            """)
        try write("003_new.lua", #"return { id = "003_new", up = function(db) db.exec("CREATE TABLE new (x)") end }"#)
        let before = try snapshot()
        #expect(test.failure("migrate.up{ folder = '\(folder)' }")
            == "test:1: migration '001_owner' was applied, and \(path("001_owner.lua")) has changed since: an applied migration must not change (add a new one)")
        #expect(try snapshot() == before)
        #expect(try status("{ folder = '\(folder)' }").contains("001_owner lua changed; 002_fill lua applied; 003_new lua pending"))
    }

    @Test func refusesInsideATransactionAndWhenReadOnly() throws {
        try writeOwnerMigrations()
        let before = try snapshot()
        #expect(test.failure("db.transaction(function() migrate.up{ folder = '\(folder)' } end)")
            == "test:1: migrate.up cannot run inside db.transaction: each migration runs in a transaction of its own")
        #expect(try snapshot() == before)
        let readOnly = try OpshSession(store: try Store.open(path: test.path, options: .init(readOnly: true)))
        #expect(throws: LuaError.self) { try readOnly.runtime.execute("migrate.up{ folder = '\(folder)' }") }
        #expect(try snapshot() == before)
    }

    @Test func theDefaultFolderIsNextToTheScript() throws {
        try writeOwnerMigrations()
        let script = test.folder.appendingPathComponent("fix.lua").path
        try "return migrate.up(), migrate.folder()".write(toFile: script, atomically: true, encoding: .utf8)
        #expect(try test.session.runtime.executeFile(script) == [["001_owner", "002_fill"], .string(folder)])
        // Without a script (a chunk typed at the prompt): no folder.
        #expect(try test.run("return migrate.folder()") == [nil])
    }

    /// Refusals, each with its message; the database stays as it was.
    @Test func badMigrationsAndTargetsAreRefused() throws {
        try writeOwnerMigrations()
        try test.run("migrate.up{ folder = '\(folder)' }")
        let cases: [(files: [String: String], code: String, message: String)] = [
            ([:], "migrate.up{ folder = '\(folder)', target = '999_nope' }",
             "test:1: unknown migration '999_nope' (known: 001_initialSchema, 002_indexes, 003_audit, 004_runners, 005_auditChain, 006_schemeEnvironment, 007_runnerRegistry, 008_pinnedFunctions, 001_owner, 002_fill)"),
            ([:], "migrate.up{ folder = '\(folder)', target = '001_owner' }",
             "test:1: migration '001_owner' is older than '002_fill', which is applied: migrations only go up"),
            ([:], "migrate.up{ folder = '\(folder)', target = '001_initialSchema' }",
             "test:1: migration '001_initialSchema' is older than '002_fill', which is applied: migrations only go up"),
            (["000_early.lua": #"return { id = "000_early", up = function(db) end }"#], "migrate.up{ folder = '\(folder)' }",
             "test:1: migration '000_early' is pending but sorts before '002_fill', which is applied: give it an id that sorts after"),
            (["x.lua": #"return { id = "002_fill", up = function(db) end }"#], "migrate.up{ folder = '\(folder)' }",
             "test:1: migration id '002_fill' is used twice: \(path("002_fill.lua")) and \(path("x.lua"))"),
            (["x.lua": #"return { id = "003 bad id", up = function(db) end }"#], "migrate.up{ folder = '\(folder)' }",
             "test:1: bad migration id '003 bad id' in \(path("x.lua")): use letters, digits, '_', '-' and '.'"),
            (["x.lua": "print('no table')"], "migrate.up{ folder = '\(folder)' }",
             "test:1: \(path("x.lua")) must return { id = \"…\", up = function(db) … end }, not nil"),
            (["x.lua": #"return { id = "003_x" }"#], "migrate.up{ folder = '\(folder)' }",
             "test:1: \(path("x.lua")) must return { id = \"…\", up = function(db) … end }: 'up' is missing"),
            (["x.lua": #"return { id = "003_x", up = function() end, down = function() end }"#], "migrate.up{ folder = '\(folder)' }",
             "test:1: \(path("x.lua")) must return { id = \"…\", up = function(db) … end }: unknown field 'down'"),
            (["x.lua": #"return { id = 3, up = function() end }"#], "migrate.up{ folder = '\(folder)' }",
             "test:1: \(path("x.lua")) must return { id = \"…\", up = function(db) … end }: 'id' is a number"),
            (["x.lua": "return { id = \"003_x\",\n up = function(db) db.exec( end }"], "migrate.up{ folder = '\(folder)' }",
             "test:1: \(short(path("x.lua"))):2: unexpected symbol near 'end'"),
            (["x.lua": "error('at load')"], "migrate.status{ folder = '\(folder)' }",
             "\(short(path("x.lua"))):1: at load"),
            ([:], "migrate.up{ folder = '\(folder)/nope' }", "test:1: no migrations folder at \(folder)/nope"),
            ([:], "migrate.up{ folder = '\(folder)', taget = 'x' }",
             "test:1: bad argument #1 to 'up' (unknown field 'taget' (expected folder, target))"),
            ([:], "migrate.up{ folder = 3 }", "test:1: bad argument #1 to 'up' ('folder' must be a string, got number)"),
            ([:], "migrate.status('x')", "test:1: bad argument #1 to 'status' (table expected, got string)"),
            ([:], "migrate.up(true)", "test:1: bad argument #1 to 'up' (table or string expected, got boolean)"),
        ]
        let before = try snapshot()
        for (files, code, message) in cases {
            for (name, text) in files { try write(name, text) }
            #expect(test.failure(code) == message, "\(code)")
            #expect(try snapshot() == before, "\(code)")
            for name in files.keys { try FileManager.default.removeItem(atPath: path(name)) }
        }
        // An applied migration whose file is gone.
        try FileManager.default.removeItem(atPath: path("002_fill.lua"))
        #expect(test.failure("migrate.up{ folder = '\(folder)' }")
            == "test:1: migration '002_fill' is applied but has no file among the migrations (was it renamed or deleted?)")
        #expect(try status("{ folder = '\(folder)' }").hasSuffix("001_owner lua applied; 002_fill lua missing"))
        #expect(try snapshot() == before)
    }
}
