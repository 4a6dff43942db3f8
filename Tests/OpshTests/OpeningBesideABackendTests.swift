import Foundation
import Testing

/// Opening never needs the write lock, also when the `-wal` file is empty
/// (the backend's first transaction after a checkpoint is still open), where
/// GRDB's pool set-up writes a throw-away table (README, "How opsh behaves
/// beside a live backend"). The backend is a real `sqlite3` process holding
/// `BEGIN IMMEDIATE` with a row written.
@Suite struct OpeningBesideABackendTests {
    /// Wall-clock seconds `body` took.
    func seconds(_ body: () throws -> Void) rethrows -> Double {
        let start = Date()
        try body()
        return Date().timeIntervalSince(start)
    }

    @Test func aReadRunsAtOnceWhileTheBackendWritesAndAWriteWaitsItsBusyTimeout() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        // Let the backend's transaction begin after a checkpoint emptied the
        // WAL: the case where opening used to write a set-up transaction.
        try sandbox.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            var read: Sandbox.Result?
            let took = try seconds {
                read = try sandbox.opsh(["--busy-timeout", "5", "-e", "return db.value(\"select count(*) from projects\")"])
            }
            #expect(read?.status == 0, "\(read?.stderr ?? "")")
            #expect(read?.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
            #expect(took < 2, "a read waited \(took) s behind another process's write lock")

            // Control: a write is refused after the busy timeout, with the reason.
            var write: Sandbox.Result?
            let waited = try seconds {
                write = try sandbox.opsh(["--busy-timeout", "0.5", "-e", "db.exec(\"DELETE FROM projects\")"])
            }
            #expect(write?.status == 3, "\(write?.stderr ?? "")")
            #expect(write?.stderr.contains("locked") == true)
            #expect(waited >= 0.5)
        }
    }

    @Test func theShellStartsAndAnswersAReadWhileTheBackendWrites() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--busy-timeout", "30"],
                                              environment: sandbox.environment)
            #expect(terminal.expect("opsh> ", timeout: 3))
            terminal.send("=db.value(\"select count(*) + 40 from projects\") + 2\r")
            #expect(terminal.expect("42", timeout: 3))
            terminal.send(".quit\r")
            #expect(terminal.waitForExit() == 0)
        }
    }

    /// `opsh migrate` is a writer like any other: behind the backend's write
    /// transaction it waits its busy timeout and exits 3; afterwards it applies.
    @Test func opshMigrateWaitsForTheWriteLockLikeAnyWriter() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("DROP INDEX telemetry_on_created; DROP INDEX telemetry_on_event_created; "
                           + "DROP INDEX generations_on_created; DROP INDEX generation_sessions_on_model_created; "
                           + "DROP INDEX model_usage_stats_on_day; DROP INDEX routing_policies_on_configuration; "
                           + "DROP INDEX crashLogs_on_build_created; DROP INDEX buildLogs_on_build_created; "
                           + "DROP INDEX builds_on_status; DROP INDEX builds_on_scheme_version; "
                           + "DROP INDEX builds_on_scheme_created; DROP INDEX schemes_on_project_order; "
                           + "DELETE FROM grdb_migrations WHERE identifier = '002_indexes'; PRAGMA wal_checkpoint(TRUNCATE);")
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            let blocked = try sandbox.opsh(["migrate", "--db", sandbox.database, "--busy-timeout", "0.3"], database: false)
            #expect(blocked.status == 3, "\(blocked.stderr)")
            #expect(blocked.stderr.contains("locked"), "\(blocked.stderr)")
        }
        #expect(try sandbox.sqlite("SELECT count(*) FROM grdb_migrations WHERE identifier = '002_indexes'") == "0")
        let migrated = try sandbox.opsh(["migrate", "--db", sandbox.database], database: false)
        #expect(migrated.status == 0, "\(migrated.stderr)")
        #expect(try sandbox.sqlite("SELECT count(*) FROM grdb_migrations WHERE identifier = '002_indexes'") == "1")
    }
}
