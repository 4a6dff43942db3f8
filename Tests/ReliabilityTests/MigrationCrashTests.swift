import Foundation
import Testing

/// `migrate.up` of a Lua migration that writes many rows, killed (SIGKILL)
/// at random moments: afterwards the migration is either applied and
/// complete (recorded, table with all its rows) or not there at all.
@Suite struct MigrationCrashTests {
    static let rows = 150_000

    @Test func migrationKilledMidwayIsWholeOrAbsent() throws {
        let stops = longRun ? 50 : 5
        let seed = reliabilitySeed(0x5EED_0020)
        var random = SeededGenerator(seed: seed)
        let scratch = try Scratch()
        let created = try scratch.opsh(["-e", "return 1"])
        #expect(created.status == 0, "\(created.stderr)")
        _ = try scratch.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
        let pristine = scratch.root + "/pristine.sqlite"
        try FileManager.default.copyItem(atPath: scratch.database, toPath: pristine)
        let folder = scratch.root + "/migrations"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try """
            return { id = "100_fill", up = function(db)
              db.exec("CREATE TABLE filled (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
              for i = 1, \(Self.rows) do db.exec("INSERT INTO filled (id, body) VALUES (?, ?)", i, string.rep("m", 64)) end
              db.exec("CREATE INDEX filled_body ON filled (body)")
            end }
            """.write(toFile: folder + "/100_fill.lua", atomically: true, encoding: .utf8)
        let script = try scratch.script("migrate.lua", """
            io.stdout:write("started\\n") io.stdout:flush()
            migrate.up{ folder = \(luaString(folder)) }
            io.stdout:write("applied\\n") io.stdout:flush()
            """)
        var survived = 0, absent = 0, applied = 0
        for attempt in 0..<stops {
            // A fresh, unmigrated copy each time.
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: scratch.database + suffix) }
            try FileManager.default.copyItem(atPath: pristine, toPath: scratch.database)
            let child = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", script]))
            let first = readFirstLine(child.standardOutput)
            usleep(UInt32.random(in: 0...600_000, using: &random))
            kill(child.pid, SIGKILL)
            let result = scratch.finish(child, stdoutPrefix: first)
            let integrity = try scratch.sqlite("PRAGMA integrity_check")
            let recorded = try scratch.sqlite("SELECT count(*) FROM grdb_migrations WHERE identifier = 'lua:100_fill'")
            let table = try scratch.sqlite("SELECT count(*) FROM sqlite_schema WHERE name IN ('filled', 'filled_body')")
            let count = table == "0" ? "0" : try scratch.sqlite("SELECT count(*) FROM filled")
            let whole = recorded == "1" && table == "2" && count == "\(Self.rows)"
            let none = recorded == "0" && table == "0"
            let ok = integrity == "ok" && (whole || none) && !(result.stdout.contains("applied") && !whole)
            #expect(ok, "attempt \(attempt): integrity \(integrity), recorded \(recorded), schema objects \(table), rows \(count), stdout \(result.stdout)")
            if ok { survived += 1 }
            if whole { applied += 1 } else if none { absent += 1 }
        }
        reportFigure("migrate.up under SIGKILL: \(survived)/\(stops) stops survived (\(applied) wholly applied, \(absent) wholly absent, \(stops - applied - absent) partial), \(Self.rows)-row Lua migration, seed \(seed)")
    }
}
