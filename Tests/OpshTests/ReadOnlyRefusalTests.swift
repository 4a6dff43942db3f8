import Foundation
import Testing

/// Under `--read-only`, what would write says so at once, with the same
/// reason on both engines (issue 24, item 15): `jobs.cancel` returned
/// false on SQLite, and `checkpoint("truncate")` "succeeded" (later: a
/// bare "disk I/O error", exit 3).
@Suite struct ReadOnlyRefusalTests {
    func prepared(_ engine: Engine) throws -> (Sandbox, TestDatabase) {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try database.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('p', 'P', 'P', '/p', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s', 'p', 'App');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES ('q1', 's', '1', 1, 'queued', 0);
            """)
        return (sandbox, database)
    }

    @Test(arguments: Engine.allCases) func jobsThatWriteAreRefusedWithTheReason(_ engine: Engine) throws {
        let (sandbox, database) = try prepared(engine)
        let refused = try sandbox.opsh(["--read-only", "-e", "return jobs.cancel('q1')"], on: database)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("jobs.cancel is refused with --read-only: it writes builds"), "\(refused.stderr)")
        #expect(try database.sql("SELECT status FROM builds WHERE id = 'q1'") == "queued")
        // Reading jobs is fine read-only.
        let read = try sandbox.opsh(["--read-only", "-e", "return jobs.get('q1').status"], on: database)
        #expect(read.stdout == "queued\n", "\(read.stderr)")
        // Control: without --read-only the same call cancels it.
        let cancelled = try sandbox.opsh(["-e", "return jobs.cancel('q1')"], on: database)
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        #expect(try database.sql("SELECT status FROM builds WHERE id = 'q1'") == "cancelled")
    }

    @Test(arguments: Engine.allCases) func checkpointAndVacuumAreRefusedWithTheReason(_ engine: Engine) throws {
        let (sandbox, database) = try prepared(engine)
        for call in ["checkpoint('truncate')", "vacuum()"] {
            let refused = try sandbox.opsh(["--read-only", "-e", call], on: database)
            #expect(refused.status == 1, "\(call): \(refused.stderr)")
            let name = call.prefix { $0 != "(" }
            #expect(refused.stderr.contains("\(name) is refused under --read-only: it writes to the database's files"), "\(call): \(refused.stderr)")
        }
        // Control: without --read-only both run.
        for call in ["checkpoint('truncate')", "vacuum()"] {
            let run = try sandbox.opsh(["-e", call], on: database)
            #expect(run.status == 0, "\(call): \(run.stderr)")
        }
    }
}
