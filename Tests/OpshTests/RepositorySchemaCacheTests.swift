import Foundation
import Testing

/// The repositories' view of a table (its columns) is cached per schema
/// (ARCHITECTURE.md, "One data path"): these attacks change the schema
/// where the cache's key did not move, and a repository call must still
/// write the columns the table has now. Each runs the real opsh, one body
/// on both engines; PostgreSQL forgets its table specs at every schema
/// change the server reports, so it held before and holds the same.
@Suite struct RepositorySchemaCacheTests {
    /// A level that added column `x` and read the table through a
    /// repository is rolled back, and another ALTER adds `y`: SQLite gives
    /// `PRAGMA schema_version` the same number again (the rollback took it
    /// back), so a cache keyed by that number alone named `x`, and the
    /// repository refused `y` ("unknown column 'y'"). Both a whole
    /// transaction rolled back and a savepoint rolled back in an open one.
    /// Control: the same script without the repository call in the
    /// rolled-back level (nothing cached from it) passed before the fix.
    /// Seen failing before the fix on SQLite (update, insert and nested:
    /// "unknown column").
    @Test(arguments: Engine.allCases) func aColumnAddedAfterARolledBackAlterIsWritten(_ engine: Engine) throws {
        for readsInRolledBackLevel in [true, false] {
            let sandbox = try Sandbox()
            let db = try sandbox.createdDatabase(engine)
            let read = { (fields: String) in readsInRolledBackLevel ? "projects.update('p', { \(fields) })" : "" }
            let run = try sandbox.opsh(["-e", """
                projects.insert{ bundleIdentifier = "p", name = "P", gitRepositoryURL = "/p" }
                print("whole", pcall(db.transaction, function()
                  db.exec("ALTER TABLE projects ADD COLUMN x TEXT")
                  \(read("x = 'gone'"))
                  error("give up", 0)
                end))
                db.exec("ALTER TABLE projects ADD COLUMN y TEXT")
                local ok, err = pcall(projects.update, "p", { y = "why" })
                print("update", ok or err)
                ok, err = pcall(projects.insert, { bundleIdentifier = "q", name = "Q", gitRepositoryURL = "/q", y = "yes" })
                print("insert", ok or err)
                db.transaction(function()
                  print("savepoint", pcall(db.transaction, function()
                    db.exec("ALTER TABLE projects ADD COLUMN z1 TEXT")
                    \(read("z1 = 'gone'"))
                    error("give up", 0)
                  end))
                  db.exec("ALTER TABLE projects ADD COLUMN z2 TEXT")
                  ok, err = pcall(projects.update, "p", { z2 = "zed" })
                  print("nested", ok or err)
                end)
                """], on: db)
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout == """
                whole\tfalse\tgive up
                update\ttrue
                insert\ttrue
                savepoint\tfalse\tgive up
                nested\ttrue

                """, "reads in the rolled-back level: \(readsInRolledBackLevel)")
            #expect(try db.sql("SELECT bundleIdentifier || '=' || coalesce(y, '-') || '/' || coalesce(z2, '-') FROM projects ORDER BY 1")
                    == "p=why/zed\nq=yes/-")
        }
    }

    /// `DROP TABLE IF EXISTS` prepared while the table was absent, and
    /// `CREATE TABLE IF NOT EXISTS` while it was present, each do nothing
    /// then; db.exec keeps them, and run again later (SQLite prepares them
    /// again in the step) they drop the table and make it anew with a
    /// column `note`. Classified once as changing nothing, they ran on the
    /// C path without telling the repositories that the schema changed,
    /// and `telemetry.insert{ note = … }` was refused ("unknown column
    /// 'note'") by a spec of the dropped table. Control: the same
    /// statements as new texts (prepared at their second run) passed
    /// before the fix. Seen failing before the fix on SQLite.
    @Test(arguments: Engine.allCases) func aTableMadeAnewByKeptStatementsIsWrittenAsItIsNow(_ engine: Engine) throws {
        let key = engine == .sqlite ? "INTEGER PRIMARY KEY" : "BIGSERIAL PRIMARY KEY"
        let real = engine == .sqlite ? "REAL" : "DOUBLE PRECISION"
        for kept in [true, false] {
            let sandbox = try Sandbox()
            let db = try sandbox.createdDatabase(engine)
            let run = try sandbox.opsh(["-e", """
                local dropIfPresent = "DROP TABLE IF EXISTS telemetry"
                local createIfAbsent = "CREATE TABLE IF NOT EXISTS telemetry(id \(key), event TEXT NOT NULL, "
                  .. "properties TEXT, session_id TEXT, created_at \(real) NOT NULL, note TEXT)"
                local function again(sql) return \(kept ? "sql" : "sql .. ' '") end
                db.transaction(function()
                  telemetry.insert{ event = "first", properties = "{}" }
                  db.exec(createIfAbsent)  -- telemetry is there: nothing to do
                  db.exec("ALTER TABLE telemetry RENAME TO telemetry_kept")
                  db.exec(dropIfPresent)   -- telemetry is not there: nothing to do
                  db.exec("ALTER TABLE telemetry_kept RENAME TO telemetry")
                  telemetry.insert{ event = "second", properties = "{}" }
                  db.exec(again(dropIfPresent))
                  db.exec(again(createIfAbsent))
                  local ok, err = pcall(telemetry.insert, { event = "third", properties = "{}", note = "new" })
                  print("insert", ok or err)
                end)
                """], on: db)
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout == "insert\ttrue\n", "kept statements: \(kept)")
            #expect(try db.sql("SELECT event || '=' || note FROM telemetry") == "third=new", "kept statements: \(kept)")
        }
    }
}

/// The same kept `DROP TABLE IF EXISTS` as above, counted: a dry run
/// names the rows of the table it drops as deleted, as for any DROP TABLE.
/// Classified once, while the table did not exist, it said it dropped
/// nothing, and the dry run said "0 deleted" (seen before the fix on
/// SQLite). Control: the same DROP as a new text (prepared when it runs).
/// PostgreSQL counts no dropped table's rows in a dry run, kept statement
/// or not (its counts come from the rows' own changes, which a DROP does
/// not make): only SQLite is held to the deleted rows here.
@Suite struct KeptSchemaStatementCountTests {
    @Test(arguments: Engine.allCases) func aKeptDropIfExistsCountsTheRowsItDrops(_ engine: Engine) throws {
        for kept in [true, false] {
            let sandbox = try Sandbox()
            let db = try sandbox.createdDatabase(engine)
            let run = try sandbox.opsh(["--dry-run", "-e", """
                local dropIfPresent = "DROP TABLE IF EXISTS scratch"
                db.exec(dropIfPresent)
                db.exec("CREATE TABLE scratch(a INTEGER)")
                db.exec("INSERT INTO scratch VALUES (1), (2), (3)")
                db.exec(\(kept ? "dropIfPresent" : "dropIfPresent .. ' '"))
                """], on: db)
            #expect(run.status == 0, "\(run.stderr)")
            let deleted = engine == .sqlite ? 3 : 0
            #expect(run.stderr.contains("scratch: 3 inserted, 0 updated, \(deleted) deleted"), "kept: \(kept): \(run.stderr)")
        }
    }
}
