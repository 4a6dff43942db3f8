import Foundation
import Testing

/// Lua migrations (`migrate.status`, `migrate.up`) on both engines: the
/// same states, the same refusals, the schema changed the same way.
@Suite struct PostgresMigrationTests {
    let server = try! PostgresServer.shared()
    let sandbox = try! Sandbox()

    @Test func luaMigrationsRunTheSameOnBothEngines() throws {
        let url = try server.makeDatabase()
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
        let onPostgres = try sandbox.opsh(["--db", url, "--create", "run", script], database: false)
        #expect(onPostgres.status == 0, "\(onPostgres.stderr)")
        let onSQLite = try sandbox.opsh(["run", script])
        #expect(onSQLite.status == 0, "\(onSQLite.stderr)")
        let lines = onPostgres.stdout.split(separator: "\n").map(String.init)
        let sqliteLines = onSQLite.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 7, "\(onPostgres.stdout)")
        #expect(lines[0] == "001_initialSchema:builtin:applied 002_indexes:builtin:applied 003_audit:builtin:applied 004_runners:builtin:applied 005_auditChain:builtin:applied 006_schemeEnvironment:builtin:applied 010_owner:lua:pending 020_broken:lua:pending")
        #expect(lines[1] == "010_owner")
        #expect(lines[2] == "ops")
        #expect(lines[3].contains("migration '020_broken' failed and was rolled back"), "\(lines[3])")
        #expect(lines[3].contains("stopped halfway"), "\(lines[3])")
        // The failed migration's table went with it; the engines word the missing table differently.
        #expect(lines[4].hasPrefix("1\tfalse\t"), "\(lines[4])")
        #expect(lines[5].hasSuffix("010_owner:lua:applied 020_broken:lua:pending"), "\(lines[5])")
        #expect(lines[6] == "true")
        try #require(sqliteLines.count == 7, "\(onSQLite.stdout)")
        #expect(lines[0...3] == sqliteLines[0...3] && lines[5...6] == sqliteLines[5...6], "\(onSQLite.stdout)")

        // A changed file of an applied migration is refused on PostgreSQL too.
        try """
            return { id = "010_owner", up = function(db) db.exec("ALTER TABLE projects ADD COLUMN owner TEXT") end }
            """.write(toFile: folder + "/010_owner.lua", atomically: true, encoding: .utf8)
        let changed = try sandbox.opsh(["--db", url, "run", try sandbox.script("status.lua", "return #migrate.up()")], database: false)
        #expect(changed.status == 1)
        #expect(changed.stderr.contains("migration '010_owner' was applied, and"), "\(changed.stderr)")
        #expect(changed.stderr.contains("has changed since"), "\(changed.stderr)")
    }
}
