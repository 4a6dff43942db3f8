import Foundation
import Testing

/// `restore{ from = FILE, table = T, where = … }`: rows deleted since a
/// backup brought back from it, the way operators restore ("the events
/// deleted yesterday"), through the real opsh on both engines.
///
/// The backup is an SQLite file on both: `backup()`'s copy on SQLite; on
/// PostgreSQL (whose `backup()` writes a pg_dump archive, which restore
/// refuses with how to use it) a file the test makes with the sqlite3 CLI
/// holding the same rows, so that the same body shows the rows written
/// back through the session on each engine.
@Suite struct RestoreTests {
    static let rows = (1...10).map { "(\($0), '\($0 % 2 == 0 ? "deploy" : "build")', '{\"n\": \($0)}', NULL, \(1_795_000_000 + $0).5)" }

    /// The database with ten events, and an SQLite backup holding them.
    func prepared(_ engine: Engine, _ sandbox: Sandbox) throws -> (db: TestDatabase, backup: String) {
        let db = try sandbox.createdDatabase(engine)
        _ = try db.sql("INSERT INTO telemetry (id, event, properties, session_id, created_at) VALUES \(Self.rows.joined(separator: ", "))")
        let backup = (sandbox.root + "/" + "backup.sqlite")
        switch engine {
        case .sqlite:
            let made = try sandbox.opsh(["-e", "return backup('\(backup)').path"], on: db)
            #expect(made.status == 0, "\(made.stderr)")
        case .postgresql:
            let file = TestDatabase(engine: .sqlite, db: backup)
            _ = try file.sql("""
                CREATE TABLE telemetry (id INTEGER PRIMARY KEY, event TEXT NOT NULL, properties TEXT, session_id TEXT, created_at REAL NOT NULL);
                INSERT INTO telemetry VALUES \(Self.rows.joined(separator: ", "));
                """)
        }
        return (db, backup)
    }

    func events(_ db: TestDatabase) throws -> String {
        try db.sql("SELECT id || ' ' || event || ' ' || properties || ' ' || created_at FROM telemetry ORDER BY id")
    }

    /// Deleted rows that match come back as they were; rows that did not
    /// match stay deleted; rows the table has are left alone; a second
    /// restore finds them all there.
    @Test(arguments: Engine.allCases) func theDeletedRowsThatMatchComeBackAsTheyWere(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let (db, backup) = try prepared(engine, sandbox)
        let before = try events(db)
        _ = try db.sql("DELETE FROM telemetry WHERE id IN (2, 3, 4, 6)")
        let script = try sandbox.script("restore.lua", """
            local r = restore{ from = "\(backup)", table = "telemetry", where = "event = ?", args = { "deploy" } }
            print(r.table, r.matched, r.restored, r.alreadyThere)
            """)
        let run = try sandbox.opsh(["run", script], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "telemetry\t5\t3\t2\n", "\(run.stdout)")
        // 2, 4 and 6 are back as they were; 3 (a build event) did not match.
        #expect(try events(db) == before.split(separator: "\n").filter { !$0.hasPrefix("3 ") }.joined(separator: "\n"))
        let again = try sandbox.opsh(["run", script], on: db)
        #expect(again.stdout == "telemetry\t5\t0\t5\n", "\(again.stdout) \(again.stderr)")
    }

    /// The sandbox has no files: restore{} is refused at its `from`, with
    /// the reason, and nothing is written; the same restore without
    /// --sandbox brings the rows back (the control).
    @Test(arguments: Engine.allCases) func theSandboxRefusesARestoreAtItsFile(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let (db, backup) = try prepared(engine, sandbox)
        _ = try db.sql("DELETE FROM telemetry WHERE id IN (2, 4)")
        let code = "local r = restore{ from = '\(backup)', table = 'telemetry' } print(r.restored)"
        let refused = try sandbox.opsh(["--sandbox", "-e", code], on: db)
        #expect(refused.status == 1, "\(refused.stdout) \(refused.stderr)")
        #expect(refused.stderr.contains("restore reads a backup file, and the sandbox has no files"), "\(refused.stderr)")
        #expect(try db.count("telemetry") == 8)
        let control = try sandbox.opsh(["-e", code], on: db)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "2\n", "\(control.stdout)")
        #expect(try db.count("telemetry") == 10)
    }

    /// A dry run says what it would restore and writes nothing; the same
    /// script without --dry-run writes (the control).
    @Test(arguments: Engine.allCases) func aDryRunRestoresNothing(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let (db, backup) = try prepared(engine, sandbox)
        _ = try db.sql("DELETE FROM telemetry WHERE id > 5")
        let script = try sandbox.script("restore.lua", "print(restore{ from = '\(backup)', table = 'telemetry' }.restored)")
        let dry = try sandbox.opsh(["run", "--dry-run", script], on: db)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout == "5\n", "\(dry.stdout)")
        #expect(try db.count("telemetry") == 5)
        let real = try sandbox.opsh(["run", script], on: db)
        #expect(real.stdout == "5\n", "\(real.stderr)")
        #expect(try db.count("telemetry") == 10)
    }

    /// Refusals, each with its reason: --read-only (the control is the run
    /// above that writes), the database itself as the backup, a table the
    /// backup lacks, a condition that does not run, a file that is not a
    /// backup. Nothing is written by any of them.
    @Test(arguments: Engine.allCases) func whatCannotBeRestoredIsRefusedWithTheReason(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let (db, backup) = try prepared(engine, sandbox)
        _ = try db.sql("DELETE FROM telemetry WHERE id > 5")
        let notABackup = (sandbox.root + "/" + "notes.txt")
        try "not a database".write(toFile: notABackup, atomically: true, encoding: .utf8)
        func refusal(_ call: String, _ arguments: [String] = []) throws -> String {
            let run = try sandbox.opsh(arguments + ["-e", call], on: db)
            #expect(run.status != 0, "\(call): \(run.stdout)")
            return run.stderr
        }
        let readOnly = try refusal("restore{ from = '\(backup)', table = 'telemetry' }", ["--read-only"])
        #expect(readOnly.contains("read-only"), "\(readOnly)")
        let noTable = try refusal("restore{ from = '\(backup)', table = 'nosuch' }")
        #expect(noTable.contains("has no table nosuch"), "\(noTable)")
        let badCondition = try refusal("restore{ from = '\(backup)', table = 'telemetry', where = 'evnt = 1' }")
        #expect(badCondition.contains("the condition did not run on the backup: no such column: evnt"), "\(badCondition)")
        let notSQLite = try refusal("restore{ from = '\(notABackup)', table = 'telemetry' }")
        #expect(notSQLite.contains("cannot be read as an SQLite database"), "\(notSQLite)")
        if engine == .sqlite {
            let itself = try refusal("restore{ from = '\(db.db)', table = 'telemetry' }")
            #expect(itself.contains("is the database itself, not a backup of it"), "\(itself)")
        } else {
            // PostgreSQL's own backup is a pg_dump archive: refused with how to restore it.
            let dump = (sandbox.root + "/" + "backup.dump")
            let made = try sandbox.opsh(["-e", "return backup('\(dump)').path"], on: db)
            #expect(made.status == 0, "\(made.stderr)")
            let archive = try refusal("restore{ from = '\(dump)', table = 'telemetry' }")
            #expect(archive.contains("is a pg_dump file") && archive.contains("pg_restore"), "\(archive)")
        }
        #expect(try db.count("telemetry") == 5)
    }

    /// A row that refers to one the table it points to does not have is
    /// refused by the database's foreign key, with what to restore first;
    /// restoring the parent first (the control) lets it in.
    @Test func aChildBeforeItsParentSaysWhatToRestoreFirst() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.sqlite)
        let made = try sandbox.opsh(["-e", """
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", displayName = "App", gitRepositoryURL = "/srv/repos/app" }
            local s = schemes.insert{ projectBundleIdentifier = "com.example.app", name = "Release", buildCommand = "make" }
            local b = builds.create(s.id, "1.0")
            logs.insert{ buildId = b.id, level = "error", category = "build", content = "boom" }
            return backup('\((sandbox.root + "/" + "b.sqlite"))').path
            """], on: db)
        #expect(made.status == 0, "\(made.stderr)")
        // A NUL in the backup's text comes back whole (bytes, not a C string).
        _ = try TestDatabase(engine: .sqlite, db: sandbox.root + "/b.sqlite").sql("UPDATE buildLogs SET content = 'bo' || char(0) || 'om'")
        _ = try db.sql("PRAGMA foreign_keys = ON; DELETE FROM builds")
        #expect(try db.count("buildLogs") == 0)
        let child = try sandbox.opsh(["-e", "restore{ from = '\((sandbox.root + "/" + "b.sqlite"))', table = 'buildLogs' }"], on: db)
        #expect(child.status != 0)
        #expect(child.stderr.contains("restore those rows first"), "\(child.stderr)")
        let both = try sandbox.opsh(["-e", """
            restore{ from = '\((sandbox.root + "/" + "b.sqlite"))', table = 'builds' }
            return restore{ from = '\((sandbox.root + "/" + "b.sqlite"))', table = 'buildLogs' }.restored
            """], on: db)
        #expect(both.status == 0, "\(both.stderr)")
        #expect(try db.count("buildLogs") == 1)
        #expect(try db.sql("SELECT hex(content) FROM buildLogs") == "626F006F6D")
    }
}
