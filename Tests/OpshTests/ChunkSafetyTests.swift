import Foundation
import Testing

/// What the question before a large chunk's commit and `undo()` promise
/// (issue 24, SQLite, items 8, 9 and 11), through a real pty with the
/// sqlite3 CLI as the other process. SQLite only: changesets (the
/// re-applied chunk, `undo()`) are SQLite's session extension's, and on
/// PostgreSQL the shell asks no question before a chunk commits until the
/// lead's session seam gives both engines one chunk.
@Suite struct ChunkSafetyTests {
    /// `telemetry` rows 1…50 with `properties` '{"a":1}'.
    func prepared() throws -> Sandbox {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
            INSERT INTO telemetry (id, event, properties, created_at) SELECT i, 'e', '{"a":1}', i FROM n;
            CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);
            INSERT INTO notes VALUES (1, 'a'), (2, 'b'), (3, 'c');
            """)
        return sandbox
    }

    func shell(_ sandbox: Sandbox) throws -> PseudoTerminal {
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--no-init"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        return terminal
    }

    func leave(_ terminal: PseudoTerminal) {
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
    }

    /// Item 9: the confirmed chunk's rows are compared whole when it is
    /// re-applied: another process made row 7 no longer match the chunk's
    /// WHERE (its `properties`, a column the chunk does not change), so
    /// nothing is committed.
    @Test func aConfirmedChunkIsRefusedWhenAnyColumnOfItsRowsChanged() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        terminal.send(".confirm 5\r")
        terminal.expect("opsh> ")
        let chunk = "db.exec(\"UPDATE telemetry SET event = 'x' WHERE id <= 50 AND properties IS NOT NULL\")\r"
        terminal.send(chunk)
        terminal.expect("commit? [y/N] ")
        try sandbox.sqlite("UPDATE telemetry SET properties = NULL WHERE id = 7")
        terminal.send("y\r")
        terminal.expect("the chunk was not committed")
        terminal.expect("telemetry (7): changed since")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry WHERE event = 'x'") == "0")
        #expect(try sandbox.sqlite("SELECT properties IS NULL FROM telemetry WHERE id = 7") == "1")
        // Control: run again, nobody writes meanwhile: row 7 no longer matches.
        terminal.send(chunk)
        terminal.expect("commit? [y/N] ")
        terminal.send("y\r")
        terminal.expect("committed: telemetry: 49 updated")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry WHERE event = 'x'") == "49")
        leave(terminal)
    }

    /// Item 9: undo() refuses when another process changed another column
    /// of a row the chunk changed; once that column is back, it goes through.
    @Test func undoIsRefusedWhenAnotherColumnOfTheRowChanged() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        terminal.send("db.exec(\"UPDATE telemetry SET event = 'u' WHERE id <= 4\")\r")
        terminal.expect("committed: telemetry: 4 updated — undo() takes it back")
        terminal.expect("opsh> ")
        try sandbox.sqlite("UPDATE telemetry SET properties = '{\"b\":2}' WHERE id = 2")
        terminal.send("undo()\r")
        terminal.expect("undo changed nothing")
        terminal.expect("telemetry (2): changed since")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry WHERE event = 'u'") == "4")
        // Control: the other column as it was, the undo goes through.
        try sandbox.sqlite("UPDATE telemetry SET properties = '{\"a\":1}' WHERE id = 2")
        terminal.send("undo()\r")
        terminal.expect("undoes chunk 1")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry WHERE event = 'u'") == "0")
        leave(terminal)
    }

    /// Item 8: Ctrl-C at `commit? [y/N]` is "no", at once, and says so:
    /// the `y` typed next is a line of Lua, not the answer.
    @Test func ctrlCAtTheQuestionRollsBack() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        terminal.send(".confirm 5\r")
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"UPDATE telemetry SET event = 'c'\")\r")
        terminal.expect("commit? [y/N] ")
        terminal.send("\u{3}")
        terminal.expect("Ctrl-C: rolled back, nothing was changed")
        terminal.expect("opsh> ")
        terminal.send("y\r")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry WHERE event = 'c'") == "0")
        // Control: y commits.
        terminal.send("db.exec(\"UPDATE telemetry SET event = 'c'\")\r")
        terminal.expect("commit? [y/N] ")
        terminal.send("y\r")
        terminal.expect("committed: telemetry: 50 updated")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry WHERE event = 'c'") == "50")
        leave(terminal)
    }

    /// Item 11: a schema change at the prompt always asks for the table's
    /// name, is noted and audited when committed, and undo() says it
    /// cannot take it back (rather than undoing the chunk before it).
    @Test func aSchemaChangeAtThePromptAsksAndCannotBeUndone() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        terminal.send("db.exec(\"UPDATE notes SET body = 'first' WHERE id = 1\")\r")
        terminal.expect("committed: notes: 1 updated — undo() takes it back")
        terminal.expect("opsh> ")
        terminal.send("db.exec('DROP TABLE notes')\r")
        terminal.expect("notes: 0 inserted, 0 updated, 3 deleted")
        terminal.expect("dropped table notes")
        terminal.expect("type the table's name to commit")
        terminal.send("y\r")
        terminal.expect("rolled back: nothing was changed")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes") == "3")
        // A new table asks too, though it changes no row.
        terminal.send("db.exec('CREATE TABLE extra (a)')\r")
        terminal.expect("created table extra")
        terminal.expect("type the table's name to commit")
        terminal.send("extra\r")
        terminal.expect("committed: ")
        terminal.expect("undo() cannot take it back: it changed the schema")
        terminal.expect("opsh> ")
        // The drop, answered with the table's name.
        terminal.send("db.exec('DROP TABLE notes')\r")
        terminal.expect("type the table's name to commit")
        terminal.send("notes\r")
        terminal.expect("committed: notes: 3 deleted")
        terminal.expect("undo() cannot take it back: it changed the schema")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM sqlite_master WHERE name = 'notes'") == "0")
        terminal.send("undo()\r")
        terminal.expect("cannot be undone: it changed the schema")
        terminal.expect("opsh> ")
        leave(terminal)
        let audited = try sandbox.sqlite("SELECT json_extract(changes, '$.notes.deleted') FROM opsh_audit WHERE mode = 'shell' ORDER BY id DESC LIMIT 1")
        #expect(audited == "3")
        // Control: the chunk before the schema changes was not undone either.
        #expect(try sandbox.sqlite("SELECT count(*) FROM sqlite_master WHERE name = 'extra'") == "1")
    }
}
