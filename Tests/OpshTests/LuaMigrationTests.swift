import Foundation
import Testing

/// Lua migrations (`migrate.status`, `migrate.up`) on both engines: the
/// same states, the same refusals, the schema changed the same way.
@Suite struct LuaMigrationTests {
    @Test(arguments: Engine.allCases) func luaMigrationsRunTheSameOnBothEngines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let folder = sandbox.root + "/scripts/migrations"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try """
            return { id = "010_owner", up = function(db)
              db.exec("ALTER TABLE projects ADD COLUMN owner TEXT")
              db.exec("UPDATE projects SET owner = 'ops'")
            end }
            """.write(toFile: folder + "/010_owner.lua", atomically: true, encoding: .utf8)
        try """
            return { id = "020_broken", up = function(db)
              db.exec("CREATE TABLE half_done (a INTEGER)")
              error("stopped halfway")
            end }
            """.write(toFile: folder + "/020_broken.lua", atomically: true, encoding: .utf8)
        let script = try sandbox.script("migrate.lua", """
            db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('p', 'P', 'P', '/p', 0)")
            local function states()
              local t = {}
              for _, m in ipairs(migrate.status()) do t[#t + 1] = m.id .. ":" .. m.kind .. ":" .. m.state end
              return table.concat(t, " ")
            end
            print(states())
            print(table.concat(migrate.up("010_owner"), ","))
            print(db.value("SELECT owner FROM projects"))
            print(select(2, pcall(migrate.up)))
            print(db.value("SELECT count(*) FROM opsh_lua_migrations"), pcall(db.value, "SELECT count(*) FROM half_done"))
            print(states())
            print(select(2, pcall(db.transaction, function() migrate.up() end)):match("cannot run inside") ~= nil)
            """)
        let run = try sandbox.opsh(["run", script], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        let builtIn = "001_initialSchema:builtin:applied 002_indexes:builtin:applied 003_audit:builtin:applied 004_runners:builtin:applied "
            + "005_auditChain:builtin:applied 006_schemeEnvironment:builtin:applied 007_runnerRegistry:builtin:applied 008_pinnedFunctions:builtin:applied"
        // The failed migration's table went with it; each engine words the missing table its own way.
        let missingTable = engine == .sqlite
            ? "SQL error: no such table: half_done (in: SELECT count(*) FROM half_done)"
            : "ERROR 42P01: relation \"half_done\" does not exist (at character 22 of: SELECT count(*) FROM half_done)"
        let lines = run.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 7, "\(run.stdout)")
        #expect(lines[0] == "\(builtIn) 010_owner:lua:pending 020_broken:lua:pending")
        #expect(lines[1] == "010_owner")
        #expect(lines[2] == "ops")
        // (Lua shortens a long chunk name, the migration file's path, from the left.)
        #expect(lines[3].hasPrefix("migration '020_broken' failed and was rolled back: "), "\(lines[3])")
        #expect(lines[3].hasSuffix("020_broken.lua:3: stopped halfway"), "\(lines[3])")
        #expect(lines[4] == "1\tfalse\t\(missingTable)")
        #expect(lines[5] == "\(builtIn) 010_owner:lua:applied 020_broken:lua:pending")
        #expect(lines[6] == "true")

        // A changed file of an applied migration is refused.
        try """
            return { id = "010_owner", up = function(db) db.exec("ALTER TABLE projects ADD COLUMN owner TEXT") end }
            """.write(toFile: folder + "/010_owner.lua", atomically: true, encoding: .utf8)
        let changed = try sandbox.opsh(["run", try sandbox.script("status.lua", "return #migrate.up()")], on: db)
        #expect(changed.status == 1)
        #expect(changed.stderr.contains("migration '010_owner' was applied, and"), "\(changed.stderr)")
        #expect(changed.stderr.contains("has changed since"), "\(changed.stderr)")
    }
}
