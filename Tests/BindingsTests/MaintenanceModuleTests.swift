import Foundation
import Testing
import LuaRuntime
@testable import Bindings

/// `backup`, `vacuum`, `check`, `stats` on real files.
@Suite struct MaintenanceModuleTests {
    let test = try! TestSession()

    func seed() throws {
        try test.run("""
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
            local rows = {}
            for i = 1, 500 do rows[i] = { event = "e" .. i % 7, properties = { i = i } } end
            telemetry.insertMany(rows)
            """)
    }

    /// Runs sqlite3 on another file.
    func sqlite3(_ path: String, _ sql: String) throws -> String {
        try sqlite3CLI(path, sql)
    }

    @Test func backupMakesACopyThatOpensAndPassesItsCheck() throws {
        try seed()
        let destination = test.folder.appendingPathComponent("backups/opsh-1.sqlite").path
        let result = try test.run("local r = backup(...) return r.path, r.pages > 0, r.bytes > 0, #r.removed", [.string(destination)])
        #expect(result == [.string(destination), true, true, 0])
        #expect(try sqlite3(destination, "PRAGMA integrity_check; SELECT count(*) FROM telemetry; SELECT bundleIdentifier FROM projects")
            == "ok\n500\ncom.example.app")
        // Owner-only, like the database.
        let mode = try FileManager.default.attributesOfItem(atPath: destination)[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o600)
        // An existing destination is refused unless overwriting.
        #expect(test.failure("backup(...)".replacingOccurrences(of: "...", with: "'\(destination)'")) ==
            "test:1: backup destination \(destination) exists; choose another path (or a folder), or allow overwriting an earlier backup with { overwrite = true }")
        try test.run("backup(..., { overwrite = true })", [.string(destination)])
        #expect(try sqlite3(destination, "PRAGMA integrity_check") == "ok")
    }

    @Test func rotationKeepsTheNewest() throws {
        try seed()
        let folder = test.folder.appendingPathComponent("rotation")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        // Not part of the series: different name shape.
        _ = FileManager.default.createFile(atPath: folder.appendingPathComponent("notes-1.txt").path, contents: Data())
        _ = FileManager.default.createFile(atPath: folder.appendingPathComponent("opsh-latest.sqlite").path, contents: Data())
        var removed: [LuaValue] = []
        for index in 1...5 {
            let path = folder.appendingPathComponent("opsh-2024050\(index).sqlite").path
            let result = try test.run("return #backup(..., { keep = 3 }).removed", [.string(path)])
            removed.append(contentsOf: result)
        }
        #expect(removed == [0, 0, 0, 1, 1])
        #expect(try visibleFiles(folder.path) == ["notes-1.txt", "opsh-20240503.sqlite", "opsh-20240504.sqlite", "opsh-20240505.sqlite", "opsh-latest.sqlite"])
    }

    @Test func checkReportsAForeignKeyViolation() throws {
        try seed()
        #expect(try test.run("local r = check() return r.ok, #r.problems, #r.foreignKeys") == [true, 0, 0])
        // Another process writes a scheme of a missing project, with its
        // foreign keys off.
        _ = try test.sqlite3("PRAGMA foreign_keys = OFF; INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('orphan', 'com.missing', 'X')")
        let values = try test.run("""
            local r = check()
            local v = r.foreignKeys[1]
            return r.ok, #r.foreignKeys, v.table, v.parent, type(v.rowid), v.message, getmetatable(r.foreignKeys).__name
            """)
        #expect(values == [false, 1, "schemes", "projects", "number", "schemes row 1 refers to a missing row of projects", "opsh.rows"])
        // Inside a transaction it checks the transaction's own state.
        #expect(try test.run("return db.transaction(function() db.exec(\"DELETE FROM schemes WHERE id = 'orphan'\") return check().ok end)") == [true])
    }

    @Test func statsCountRowsPerTable() throws {
        try seed()
        let values = try test.run("""
            local s = stats()
            local found
            for _, t in ipairs(s.tables) do if t.table == "telemetry" then found = t end end
            return s.rows.telemetry, s.rows.projects, s.rows.builds, found.rows, s.fileSize > 0, s.pageSize > 0,
                   s.migrations[1], s.path
            """)
        #expect(values == [500, 1, 0, 500, true, true, "001_initialSchema", .string(test.path)])
    }

    @Test func vacuumRuns() throws {
        try seed()
        try test.run("db.exec('DELETE FROM telemetry')")
        let values = try test.run("local r = vacuum() return r.freePagesBefore > 0, r.pagesAfter < r.pagesBefore")
        #expect(values == [true, true])
        #expect(try test.sqlText("PRAGMA freelist_count") == "0")
        #expect(try test.sqlText("PRAGMA integrity_check") == "ok")
    }

    static let badInput: [(String, String)] = [
        ("backup()", "test:1: bad argument #1 to 'backup' (string expected, got no value)"),
        ("backup('')", "test:1: bad argument #1 to 'backup' (a file path expected, got an empty string)"),
        ("backup('x-1.sqlite', { kep = 3 })", "test:1: bad argument #2 to 'backup' (unknown option 'kep' (options: keep, overwrite))"),
        ("backup('x-1.sqlite', { keep = 0 })", "test:1: bad argument #2 to 'backup' (keep: a number of backups of 1 or more expected, got 0)"),
        ("backup('x-1.sqlite', { keep = 'all' })", "test:1: bad argument #2 to 'backup' (keep: number expected, got string)"),
        ("backup('backup.sqlite', { keep = 3 })",
         "test:1: backup: keep needs a file name with a date or a number in it (e.g. os.date(\"opsh-%Y%m%d-%H%M%S.sqlite\")), or a folder, to tell its backups apart; got backup.sqlite"),
        ("db.transaction(function() backup('x.sqlite') end)",
         "test:1: backup cannot run inside db.transaction: it needs a database connection of its own; call it outside the transaction"),
        ("db.transaction(function() vacuum() end)",
         "test:1: vacuum cannot run inside db.transaction: it needs a database connection of its own; call it outside the transaction"),
    ]

    @Test(arguments: badInput)
    func badInputIsRefused(_ code: String, _ message: String) throws {
        try seed()
        let before = try test.databaseFingerprint()
        #expect(test.failure(code) == message)
        #expect(try test.databaseFingerprint() == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: test.folder.path).filter { !$0.hasPrefix("test.sqlite") } == [])
    }

    @Test func dryRunSkipsBackup() throws {
        try seed()
        let destination = test.folder.appendingPathComponent("dry-1.sqlite").path
        let (values, _) = try test.session.database.dryRun {
            try test.run("local r = backup(...) return r.dryRun", [.string(destination)])
        }
        #expect(values == [true])
        #expect(!FileManager.default.fileExists(atPath: destination))
    }
}
