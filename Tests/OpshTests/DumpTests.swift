import Foundation
import Testing

/// `.dump [TABLE]` at the prompt: SQL text that sqlite3 reads back into an
/// empty file with the same rows, byte for byte; control characters in the
/// data never reach the terminal raw. PostgreSQL's dump is pg_dump's: the
/// command says so.
@Suite struct DumpTests {
    @Test(arguments: Engine.allCases) func aDumpReadsBackIntoAnEmptyFile(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let terminal = try PseudoTerminal(arguments: ["--db", db.db], environment: sandbox.environment)
        terminal.expect("> ")
        guard engine == .sqlite else {
            terminal.send(".dump telemetry\r")
            terminal.expect("on PostgreSQL the dump is pg_dump's: pg_dump --inserts --no-owner --table=telemetry")
            terminal.expect("> ")
            terminal.send(".q\r")
            #expect(terminal.waitForExit() == 0)
            return
        }
        try db.sql("""
            INSERT INTO telemetry (id, event, properties, session_id, created_at) VALUES
              (1, 'it''s', '{"a": "b"}', NULL, 0.1 + 0.2),
              (2, 'two' || char(10) || 'lines' || char(27) || '[31m', NULL, '', 1e-7),
              (3, 'émoji 🎉', '[]', 's', 1795000000);
            """)
        let file = sandbox.root + "/dump.sql"
        terminal.send(".dump telemetry\r")
        terminal.expect("INSERT INTO \"telemetry\" VALUES(2,'two'||char(10)||'lines'||char(27)||'[31m',NULL,'',1e-07);")
        terminal.expect("COMMIT;")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("\u{1B}[31m"), "the escape reached the terminal raw")
        terminal.send(".output \(file)\r")
        terminal.expect("> ")
        terminal.send(".dump\r")
        terminal.expect("> ")
        terminal.send(".output\r")
        terminal.expect("> ")
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
        // Read back by sqlite3 into an empty file: the same rows, exactly.
        let copy = TestDatabase(engine: .sqlite, db: sandbox.root + "/restored.sqlite")
        let load = try sandbox.run("/usr/bin/sqlite3", [copy.db, ".read \(file)"])
        #expect(load.status == 0 && load.stderr.isEmpty, "\(load.stderr)")
        let rows = "SELECT quote(id), quote(event), quote(properties), quote(session_id), quote(created_at) FROM telemetry ORDER BY id"
        #expect(try copy.sql(rows) == db.sql(rows))
        #expect(try copy.sql("PRAGMA integrity_check") == "ok")
        let schema = "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        #expect(try copy.sql(schema) == db.sql(schema))
        #expect(try copy.sql("SELECT count(*) FROM grdb_migrations") == db.sql("SELECT count(*) FROM grdb_migrations"))
    }
}
