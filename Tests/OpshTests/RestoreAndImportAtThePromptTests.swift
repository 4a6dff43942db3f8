import Foundation
import Testing

/// `restore{}` and `.import` typed at the prompt, in a real pseudo-terminal:
/// each is one chunk, so the shell shows what it changes, asks past
/// `.confirm`'s threshold, and (on SQLite) `undo()` takes it back.
@Suite struct RestoreAndImportAtThePromptTests {
    @Test(arguments: Engine.allCases) func aRestoreIsShownConfirmedAndUndoable(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let (db, backup) = try RestoreTests().prepared(engine, sandbox)
        try db.sql("DELETE FROM telemetry WHERE id > 5")
        let terminal = try sandbox.shell(db)
        terminal.send(".confirm 2\r")
        terminal.expect("> ")
        terminal.send("restore{ from = '\(backup)', table = 'telemetry', where = 'id > ?', args = { 7 } }\r")
        terminal.expect("this chunk changes 3 rows:")
        terminal.expect("telemetry: 3 inserted, 0 updated, 0 deleted")
        terminal.expect("commit? [y/N] ")
        #expect(try db.count("telemetry") == 5)
        terminal.send("y\r")
        terminal.expect("committed: telemetry: 3 inserted")
        terminal.expect("> ")
        #expect(try db.count("telemetry") == 8)
        #expect(try db.sql("SELECT properties FROM telemetry WHERE id = 9") == "{\"n\": 9}")
        terminal.send("undo()\r")
        if engine == .sqlite {
            terminal.expect("telemetry: 0 inserted, 0 updated, 3 deleted")
            terminal.expect("commit? [y/N] ")
            terminal.send("y\r")
            terminal.expect("committed: telemetry: 3 deleted")
            terminal.expect("> ")
            #expect(try db.count("telemetry") == 5)
        } else {
            terminal.expect("undo() is not available on PostgreSQL")
            terminal.expect("> ")
        }
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// `.import FILE TABLE`: a CSV whose header names the columns in its
    /// own order, and a TSV; a file with a bad line imports nothing and
    /// names the line (the good file before it is the control).
    @Test(arguments: Engine.allCases) func dotImportReadsAFileAsOneChunk(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let csv = sandbox.root + "/events.csv"
        try "created_at,event,properties\n10.5,deploy,\"{\"\"n\"\": 1}\"\n11,\"build, nightly\",\n12,build,\n".write(toFile: csv, atomically: true, encoding: .utf8)
        let tsv = sandbox.root + "/events.tsv"
        try "event\tcreated_at\ntsv\t13\n".write(toFile: tsv, atomically: true, encoding: .utf8)
        let bad = sandbox.root + "/bad.csv"
        try "event,created_at\nok,14\nbroken\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let terminal = try sandbox.shell(db)
        terminal.send(".import \(csv) telemetry\r")
        terminal.expect("3 rows read from \(csv) into telemetry")
        terminal.expect("committed: telemetry: 3 inserted")
        terminal.expect("> ")
        #expect(try db.sql("SELECT event || '|' || coalesce(properties, 'NULL') || '|' || created_at FROM telemetry ORDER BY created_at")
                == "deploy|{\"n\": 1}|10.5\nbuild, nightly|NULL|11\(engine == .sqlite ? ".0" : "")\nbuild|NULL|12\(engine == .sqlite ? ".0" : "")")
        terminal.send(".import \(tsv) telemetry\r")
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("> ")
        terminal.send(".import \(bad) telemetry\r")
        terminal.expect("line 3 of \(bad)")
        terminal.expect("nothing was imported")
        terminal.expect("> ")
        #expect(try db.count("telemetry") == 4)
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }
}
