import Foundation
import Testing

/// `--dry-run` through the real executable: a script cannot commit what a
/// dry run promises to roll back, whatever SQL it sends (issue 13, item 1).
@Suite struct DryRunIntegrityTests {
    static let attacks = [
        "db.exec('/* */ COMMIT')",
        "db.exec('DELETE FROM telemetry; COMMIT')",
        "db.exec('end transaction')",
        "db.value('-- x\\n  CoMmIt')",
        "for _ in db.rows('RELEASE x') do end",
    ]

    @Test(arguments: attacks)
    func aDryRunNeverKeepsWritesAndNeverClaimsARollbackItDidNotDo(attack: String) throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("INSERT INTO projects VALUES ('com.example.demo', 'Demo', 'Demo', 'u', 1)")
        try sandbox.sqlite("INSERT INTO telemetry (event, created_at) VALUES ('e', 1)")
        let before = try sandbox.sqlite("SELECT name FROM projects; SELECT count(*) FROM telemetry")
        let result = try sandbox.opsh(["--dry-run", "-e", "projects.update('com.example.demo', { name = 'X' }); db.exec('DELETE FROM telemetry'); \(attack)"])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("transaction control (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE) is not run through db"))
        #expect(!result.stderr.contains("it would have changed"))
        #expect(try sandbox.sqlite("SELECT name FROM projects; SELECT count(*) FROM telemetry") == before)
        // Control: the same writes without the attack are reported and rolled back.
        let control = try sandbox.opsh(["--dry-run", "-e", "projects.update('com.example.demo', { name = 'X' }); db.exec('DELETE FROM telemetry')"])
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stderr.contains("dry run: rolled back; it would have changed"))
        #expect(control.stderr.contains("telemetry: 0 inserted, 0 updated, 1 deleted"))
        #expect(try sandbox.sqlite("SELECT name FROM projects; SELECT count(*) FROM telemetry") == before)
        // And without --dry-run the writes land: the attack is what was stopped.
        let real = try sandbox.opsh(["-e", "projects.update('com.example.demo', { name = 'X' })"])
        #expect(real.status == 0, "\(real.stderr)")
        #expect(try sandbox.sqlite("SELECT name FROM projects") == "X")
    }

    /// A dry run on a file another process was writing to as opsh opened
    /// it (the store falls back to one queue, as it does beside a busy
    /// backend) reads before and after its lock waits: it crashed ("Database
    /// methods are not reentrant") at its first repository read. SQLite
    /// only: the fallback is SQLite's store. The control: the same read
    /// without --dry-run.
    @Test func aDryRunOpenedWhileTheFileWasBusyReadsWithoutCrashing() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("INSERT INTO projects VALUES ('com.example.demo', 'Demo', 'Demo', 'u', 1)")
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            let dry = try sandbox.opsh(["--dry-run", "--busy-timeout", "0.5", "-e", "return projects.count()"])
            #expect(dry.status == 0, "\(dry.stderr)")
            #expect(dry.stdout == "1\n", "\(dry.stdout)")
            #expect(dry.stderr.contains("no rows would have changed"), "\(dry.stderr)")
            let control = try sandbox.opsh(["--busy-timeout", "0.5", "-e", "return projects.count()"])
            #expect(control.status == 0, "\(control.stderr)")
            #expect(control.stdout == "1\n", "\(control.stdout)")
        }
    }
}
