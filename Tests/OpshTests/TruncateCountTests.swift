import Foundation
import Testing

/// TRUNCATE deletes every row without the server counting one: opsh counts
/// them (the schema's BEFORE TRUNCATE triggers note each table's rows), so
/// a dry run says what it would delete, `--max-changes` caps it and the
/// audit row records it (issue "Every hole found by attack", item 20).
/// PostgreSQL only: SQLite has no TRUNCATE (its `DELETE FROM t` without a
/// WHERE is counted row by row like any delete).
@Suite struct TruncateCountTests {
    func prepared() throws -> (Sandbox, TestDatabase) {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('p', 'P', 'P', '/p', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s', 'p', 'App');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) SELECT 'b' || i, 's', '1', i, i FROM generate_series(1, 40) i;
            INSERT INTO telemetry (event, created_at) SELECT 'e', i FROM generate_series(1, 25) i;
            """)
        return (sandbox, database)
    }

    @Test func aDryRunCountsWhatTruncateWouldDelete() throws {
        let (sandbox, database) = try prepared()
        let run = try sandbox.opsh(["--dry-run", "-e", "db.exec('TRUNCATE telemetry'); db.exec('TRUNCATE builds CASCADE')"], on: database)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("telemetry: 0 inserted, 0 updated, 25 deleted"), "\(run.stderr)")
        #expect(run.stderr.contains("builds: 0 inserted, 0 updated, 40 deleted"), "\(run.stderr)")
        #expect(try database.count("telemetry") == 25)
    }

    @Test func maxChangesCapsATruncate() throws {
        let (sandbox, database) = try prepared()
        let capped = try sandbox.opsh(["--max-changes", "10", "-e", "db.exec('TRUNCATE telemetry')"], on: database)
        #expect(capped.status == 1)
        #expect(capped.stderr.contains("changed 25 rows (telemetry: 25 deleted), more than its limit of 10"), "\(capped.stderr)")
        #expect(try database.count("telemetry") == 25)
        // Control: under a cap it allows, the TRUNCATE commits, and the
        // audit row says what it deleted.
        let allowed = try sandbox.opsh(["--max-changes", "100", "-e", "db.exec('TRUNCATE telemetry')"], on: database)
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(try database.count("telemetry") == 0)
        #expect(try database.sql("SELECT changes FROM opsh_audit WHERE mode = 'eval' ORDER BY id DESC LIMIT 1").contains("\"telemetry\""))
    }

    /// A table opsh did not make has no trigger to note its rows, and a
    /// script can erase the note opsh's triggers leave: the counters then
    /// saw none of a TRUNCATE's rows. `--max-changes 5` let 20 go, the dry
    /// run said nothing would change, the audit recorded nothing
    /// (scripts/reliability-attacks.md, 28p, 28o). Such a table's new file
    /// gives it away, and its rows are counted as a dropped table's are.
    @Test func aTruncateOfATableOpshDidNotMakeIsCounted() throws {
        let (sandbox, database) = try prepared()
        try database.sql("CREATE TABLE backend_t (id int); INSERT INTO backend_t SELECT generate_series(1, 20)")
        let dry = try sandbox.opsh(["--dry-run", "-e", "db.exec('TRUNCATE backend_t')"], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("backend_t: 0 inserted, 0 updated, 20 deleted"), "\(dry.stderr)")
        let capped = try sandbox.opsh(["--max-changes", "5", "-e", "db.transaction(function() db.exec('TRUNCATE backend_t') end)"], on: database)
        #expect(capped.status == 1)
        #expect(capped.stderr.contains("changed 20 rows (backend_t: 20 deleted), more than its limit of 5"), "\(capped.stderr)")
        #expect(try database.count("backend_t") == 20)
        // Control: without a limit the same TRUNCATE empties the table.
        let run = try sandbox.opsh(["-e", "db.transaction(function() db.exec('TRUNCATE backend_t') end)"], on: database)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try database.count("backend_t") == 0)
    }

    @Test func aTruncateWhoseNoteTheScriptErasedIsCounted() throws {
        let (sandbox, database) = try prepared()
        let script = "db.transaction(function() db.exec('TRUNCATE telemetry') db.value([[SELECT pg_catalog.set_config('opsh.truncated', '', true)]]) end)"
        let capped = try sandbox.opsh(["--max-changes", "10", "-e", script], on: database)
        #expect(capped.status == 1)
        #expect(capped.stderr.contains("changed 25 rows (telemetry: 25 deleted), more than its limit of 10"), "\(capped.stderr)")
        #expect(try database.count("telemetry") == 25)
        let oneStatement = try sandbox.opsh(["--max-changes", "10", "-e",
                                             "db.exec([[TRUNCATE telemetry; SELECT pg_catalog.set_config('opsh.truncated', '', true)]])"],
                                            on: database)
        #expect(oneStatement.status == 1)
        #expect(oneStatement.stderr.contains("changed 25 rows (telemetry: 25 deleted)"), "\(oneStatement.stderr)")
        #expect(try database.count("telemetry") == 25)
        // Control: without a limit the same script empties the table.
        let run = try sandbox.opsh(["-e", script], on: database)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try database.count("telemetry") == 0)
    }
}
