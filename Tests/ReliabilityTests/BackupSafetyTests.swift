import Foundation
import Git
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `backup` and `export` never delete or overwrite what opsh did not make,
/// files appear whole, and --read-only / --dry-run hold for files too
/// (issue 13, items 3 and 6).
@Suite struct BackupSafetyTests {
    /// A migrated database with some rows.
    static func prepared() throws -> Scratch {
        let scratch = try Scratch()
        let made = try scratch.opsh(["-e", """
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
            db.exec("CREATE TABLE fill (id INTEGER PRIMARY KEY, b BLOB)")
            """])
        #expect(made.status == 0, "\(made.stderr)")
        return scratch
    }

    func backup(_ scratch: Scratch, _ arguments: String, options: [String] = []) throws -> Scratch.Result {
        try scratch.opsh(options + ["-e", "local r = backup(\(arguments)) return r.path, r.removed and #r.removed, r.dryRun"])
    }

    @Test func theDatabaseUnderAnyNameIsRefused() throws {
        let scratch = try Self.prepared()
        let data = scratch.root + "/data"
        symlink(scratch.database, data + "/alias.sqlite")
        link(scratch.database, data + "/hard.sqlite")
        let before = try scratch.sqlite("SELECT count(*) FROM projects")
        for name in [scratch.database, data + "/alias.sqlite", data + "/hard.sqlite", data + "/../data/./test.sqlite",
                     scratch.database + "-wal", scratch.database + "-shm"] {
            if !FileManager.default.fileExists(atPath: name) { continue }
            let result = try backup(scratch, "'\(name)', { overwrite = true }")
            #expect(result.status == 1, "\(name): \(result.stderr)")
            #expect(result.stderr.contains("is the database being backed up"), "\(name): \(result.stderr)")
        }
        #expect(try scratch.sqlite("SELECT count(*) FROM projects") == before)
        #expect(try scratch.sqlite("PRAGMA integrity_check") == "ok")
        // Control: another path works.
        let fine = try backup(scratch, "'\(scratch.root)/copy.sqlite'")
        #expect(fine.status == 0, "\(fine.stderr)")
        #expect(try scratch.sqlite("SELECT count(*) FROM projects", file: scratch.root + "/copy.sqlite") == before)
    }

    @Test func aFolderGetsTheBackupInsideAndKeepsEverythingElse() throws {
        let scratch = try Self.prepared()
        let folder = scratch.root + "/precious"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try "keep me".write(toFile: folder + "/notes.txt", atomically: true, encoding: .utf8)
        let result = try backup(scratch, "'\(folder)', { overwrite = true }")
        #expect(result.status == 0, "\(result.stderr)")
        let made = result.stdout.split(separator: "\t").first.map(String.init) ?? ""
        #expect(made.hasPrefix(folder + "/opsh-") && made.hasSuffix(".sqlite"), "\(made)")
        #expect(try String(contentsOfFile: folder + "/notes.txt", encoding: .utf8) == "keep me")
        #expect(try scratch.sqlite("PRAGMA integrity_check", file: made) == "ok")
        var status = stat()
        #expect(stat(made, &status) == 0 && status.st_mode & 0o777 == 0o600)
    }

    @Test func overwriteReplacesOnlyAnEarlierBackup() throws {
        let scratch = try Self.prepared()
        let other = scratch.root + "/notes.sqlite"
        try "not a database".write(toFile: other, atomically: true, encoding: .utf8)
        let refused = try backup(scratch, "'\(other)', { overwrite = true }")
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("it is not an earlier opsh backup"), "\(refused.stderr)")
        #expect(try String(contentsOfFile: other, encoding: .utf8) == "not a database")
        // Without overwrite an existing file is refused too.
        let exists = try backup(scratch, "'\(other)'")
        #expect(exists.stderr.contains("exists; choose another path"), "\(exists.stderr)")
        // Control: an earlier backup is replaced.
        let first = try backup(scratch, "'\(scratch.root)/b.sqlite'")
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try scratch.opsh(["-e", "projects.insert{ bundleIdentifier = 'two', name = 'Two', gitRepositoryURL = '/x' }"]).status == 0)
        let second = try backup(scratch, "'\(scratch.root)/b.sqlite', { overwrite = true }")
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try scratch.sqlite("SELECT count(*) FROM projects", file: scratch.root + "/b.sqlite") == "2")
    }

    @Test func rotationDeletesOnlyVerifiedBackupsAndNothingUnderReadOnly() throws {
        let scratch = try Self.prepared()
        let folder = scratch.root + "/backups"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // Two earlier backups, and a file whose name matches but is not one.
        for day in ["20260101", "20260102"] {
            #expect(try backup(scratch, "'\(folder)/opsh-\(day).sqlite'").status == 0)
        }
        try "my notes".write(toFile: folder + "/opsh-20250101.sqlite", atomically: true, encoding: .utf8)
        let readOnly = try backup(scratch, "'\(folder)/opsh-20260103.sqlite', { keep = 1 }", options: ["--read-only"])
        #expect(readOnly.status == 1)
        #expect(readOnly.stderr.contains("--read-only deletes and overwrites nothing"), "\(readOnly.stderr)")
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: folder)).count == 3)
        // Control: without --read-only, rotation removes the two backups, not the notes.
        let rotated = try backup(scratch, "'\(folder)/opsh-20260103.sqlite', { keep = 1 }")
        #expect(rotated.status == 0, "\(rotated.stderr)")
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: folder))
                == ["opsh-20260103.sqlite", "opsh-20250101.sqlite"])
        #expect(try String(contentsOfFile: folder + "/opsh-20250101.sqlite", encoding: .utf8) == "my notes")
    }

    @Test func aDryRunWritesNoFile() throws {
        let scratch = try Self.prepared()
        let result = try backup(scratch, "'\(scratch.root)/dry.sqlite'", options: ["--dry-run"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasSuffix("true\n"), "\(result.stdout)")
        #expect(!FileManager.default.fileExists(atPath: scratch.root + "/dry.sqlite"))
        let export = try scratch.opsh(["--dry-run", "-e", "local path, rows, report = export.project('com.example.app', { file = '\(scratch.root)/app.json' }) return report.dryRun, rows.projects"])
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.stdout == "true\t1\n")
        #expect(!FileManager.default.fileExists(atPath: scratch.root + "/app.json"))
        // Control: without --dry-run both write their file.
        #expect(try backup(scratch, "'\(scratch.root)/dry.sqlite'").status == 0)
        #expect(FileManager.default.fileExists(atPath: scratch.root + "/dry.sqlite"))
        let written = try scratch.opsh(["-e", "export.project('com.example.app', { file = '\(scratch.root)/app.json' })"])
        #expect(written.status == 0, "\(written.stderr)")
        #expect(FileManager.default.fileExists(atPath: scratch.root + "/app.json"))
    }

    @Test func exportNeverOverwritesAFileItDidNotMake() throws {
        let scratch = try Self.prepared()
        let path = scratch.root + "/report.json"
        try "{\"mine\": true}".write(toFile: path, atomically: true, encoding: .utf8)
        for options in ["", ", overwrite = true"] {
            let result = try scratch.opsh(["-e", "export.project('com.example.app', { file = '\(path)'\(options) })"])
            #expect(result.status == 1)
            #expect(result.stderr.contains("opsh does not overwrite a file it did not make"), "\(result.stderr)")
            #expect(try String(contentsOfFile: path, encoding: .utf8) == "{\"mine\": true}")
        }
        // Control: an earlier export is replaced with overwrite = true.
        let exported = scratch.root + "/app.json"
        #expect(try scratch.opsh(["-e", "export.project('com.example.app', { file = '\(exported)' })"]).status == 0)
        let again = try scratch.opsh(["-e", "export.project('com.example.app', { file = '\(exported)', overwrite = true })"])
        #expect(again.status == 0, "\(again.stderr)")
    }

    @Test(.enabled(if: TmpfsMount.permitted, TmpfsMount.skipReason))
    func aFullDiskSaysDiskFullAndLeavesNothing() throws {
        let scratch = try Self.prepared()
        let filled = try scratch.opsh(["-e", "db.transaction(function() for i = 1, 300 do db.exec('INSERT INTO fill (b) VALUES (randomblob(4096))') end end)"])
        #expect(filled.status == 0, "\(filled.stderr)")
        let mount = try TmpfsMount(on: scratch.root + "/small", size: "256k")
        defer { mount.unmount() }
        let result = try backup(scratch, "'\(mount.folder)/full.sqlite'")
        #expect(result.status == 3, "exit \(result.status): \(result.stderr)")
        #expect(result.stderr.contains("disk full"), "\(result.stderr)")
        #expect(!result.stderr.contains("not an error"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: mount.folder) == [])
        // Control: the same backup fits elsewhere.
        #expect(try backup(scratch, "'\(scratch.root)/full.sqlite'").status == 0)
        reportFigure("backup onto a full 256 KiB tmpfs: exit \(result.status), says \"disk full\", \(try FileManager.default.contentsOfDirectory(atPath: mount.folder).count) files left behind")
    }

    /// SIGKILL at seeded random moments of a backup: no file at the final
    /// name unless it verifies, and the next backup into the folder removes
    /// what the killed one left.
    @Test func aKilledBackupLeavesNoUnverifiedFileAtItsName() throws {
        let scratch = try Self.prepared()
        let filled = try scratch.opsh(["-e", "db.transaction(function() for i = 1, 4000 do db.exec('INSERT INTO fill (b) VALUES (randomblob(4096))') end end)"])
        #expect(filled.status == 0, "\(filled.stderr)")
        let rows = try scratch.sqlite("SELECT count(*) FROM fill")
        let folder = scratch.root + "/killed"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        var generator = SeededGenerator(seed: reliabilitySeed(1324))
        let stops = longRun ? 100 : 6
        var whole = 0, absent = 0
        for stop in 0..<stops {
            let target = "\(folder)/b\(stop).sqlite"
            let child = try scratch.spawn(opshExecutable, scratch.withDatabase(["-e", "backup('\(target)')"]))
            usleep(UInt32.random(in: 5_000...90_000, using: &generator))  // start-up ~10 ms, the copy ~70 ms
            kill(child.pid, SIGKILL)
            _ = collect(child)
            if FileManager.default.fileExists(atPath: target) {
                #expect(try scratch.sqlite("PRAGMA integrity_check", file: target) == "ok")
                #expect(try scratch.sqlite("SELECT count(*) FROM fill", file: target) == rows)
                whole += 1
            } else {
                absent += 1
            }
        }
        // The next backup removes the temporaries of the killed ones.
        #expect(try backup(scratch, "'\(folder)/after.sqlite'").status == 0)
        let left = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasPrefix(".") }
        #expect(left == [], "\(left)")
        reportFigure("backup SIGKILLed at random moments (\(longRun ? "long" : "short") run): \(stops) stops, \(whole) left a whole verified copy, \(absent) left no file at the final name, \(left.count) temporary files left after the next backup")
    }
}
