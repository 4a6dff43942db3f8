import Foundation
import Testing

/// A backend's migration (another process's `ALTER TABLE … ADD COLUMN`)
/// between two calls of one session must not fail the second. On
/// PostgreSQL a statement opsh keeps prepared goes stale then ("cached
/// plan must not change result type"), and inside a transaction the server
/// has aborted it by the time it says so. The Lua `db` path runs it again
/// under its savepoint; the build queue's own transactions (`jobs.enqueue`,
/// `jobs.create`, a runner's claim: `SELECT * FROM schemes … FOR UPDATE` on
/// a pooled connection) failed with the old hint "roll back the transaction
/// first", which a script cannot do. One body, both engines (SQLite
/// prepares a statement again itself).
@Suite struct StaleStatementOutsideLuaTests {
    @Test(arguments: Engine.allCases) func aColumnAddedBetweenTwoEnqueuesFailsNeither(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let result = try sandbox.opshPausing("""
            projects.insert{ bundleIdentifier = 'com.x', name = 'X', gitRepositoryURL = '/x' }
            local s = schemes.insert{ projectBundleIdentifier = 'com.x', name = 'Release', buildCommand = 'true' }
            print('first', jobs.enqueue{ scheme = s.id, version = '1.0.0' }.status) io.stdout:flush()
            io.read('l')
            print('second', jobs.enqueue{ scheme = s.id, version = '1.0.1' }.status)
            print('third', jobs.enqueue{ scheme = s.id, version = '1.0.2' }.status)
            """, on: db) {
            try db.sql("ALTER TABLE projects ADD COLUMN note TEXT; ALTER TABLE schemes ADD COLUMN note TEXT")
        }
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "first\tqueued\nsecond\tqueued\nthird\tqueued\n", "\(result.stdout)")
        #expect(!result.stderr.contains("roll back the transaction first"), "\(result.stderr)")
        #expect(try db.count("builds") == 3)
    }

    /// A script's `DEALLOCATE ALL` (PostgreSQL's own statement: SQLite has
    /// none) drops the statements opsh keeps prepared, also those the same
    /// round trip reads the counters and releases the savepoint with. It
    /// failed the script's statement outside a transaction (the reading
    /// after it gone) and rolled back a whole `db.transaction` as "transaction
    /// control"; psql runs it. Every statement before and after it, the
    /// script's and opsh's, must do what it says, in and out of a
    /// transaction, with `--max-changes` counting.
    @Test func aScriptsDeallocateAllFailsNothingOfOpshs() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        let run = try sandbox.opsh(["--max-changes", "10", "-e", """
            projects.insert{ bundleIdentifier = 'com.a', name = 'A', gitRepositoryURL = '/a' }
            print(projects.count())
            db.exec("DEALLOCATE ALL")
            print(projects.count())
            db.exec("UPDATE projects SET name = name || ?", "1")
            db.exec("DEALLOCATE ALL")
            db.transaction(function()
              print(projects.get('com.a').name)
              db.exec("DEALLOCATE ALL")
              db.exec("UPDATE projects SET name = name || ?", "2")
              db.exec("DEALLOCATE ALL")
              print(projects.get('com.a').name)
            end)
            print(db.value("SELECT name FROM projects"))
            """], on: database)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "1\n1\nA1\nA12\nA12\n", "\(run.stdout)")
        #expect(try database.sql("SELECT name FROM public.projects") == "A12")
    }
}
