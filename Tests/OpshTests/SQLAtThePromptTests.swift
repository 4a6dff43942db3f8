import Foundation
import Testing

/// SQL typed at the prompt (issue 26): a chunk
/// that is not Lua and starts with an SQL keyword runs as SQL, read until
/// `;` as sqlite3 and psql read it, rows printed as `db.query`'s are, and
/// through the chunk's one transaction: the question, undo() and the
/// session's refusals are the ones a Lua chunk gets. One body, both engines.
@Suite struct SQLAtThePromptTests {
    func seeded(_ engine: Engine) throws -> (Sandbox, TestDatabase) {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('alpha', 0), ('bravo', 0), ('charlie', 0)")
        return (sandbox, database)
    }

    @Test(arguments: Engine.allCases) func aQueryPrintsItsRowsAsATable(_ engine: Engine) throws {
        let (sandbox, database) = try seeded(engine)
        let terminal = try sandbox.shell(database)
        terminal.send("SELECT event FROM telemetry ORDER BY event LIMIT 2;\r")
        terminal.expect("event")
        terminal.expect("alpha")
        terminal.expect("bravo")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("syntax error"), "\(terminal.transcript)")
        // Over several lines, lower case, until the `;` (the continuation
        // prompt meanwhile); a `;` in a string does not end it.
        terminal.send("select event, 'a;b' AS odd\r")
        terminal.expect("  ... ")
        terminal.send("  from telemetry\r")
        terminal.expect("  ... ")
        terminal.send("  where event = 'charlie';\r")
        terminal.expect("a;b")
        terminal.expect("> ")
        // Two statements on a line: both results.
        terminal.send("SELECT 7 AS seven; SELECT 8 AS eight;\r")
        terminal.expect("seven")
        terminal.expect("eight")
        terminal.expect("> ")
        // Lua's select is still Lua.
        terminal.send("select('#', 'a', 'b', 'c')\r")
        terminal.expect("3")
        terminal.expect("> ")
        // An SQL error says what the engine said, without a Lua traceback.
        terminal.send("SELECT nosuchcolumn FROM telemetry;\r")
        terminal.expect("nosuchcolumn")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("stack traceback"), "\(terminal.transcript)")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    @Test(arguments: Engine.allCases) func aWriteGoesThroughTheChunkTransaction(_ engine: Engine) throws {
        let (sandbox, database) = try seeded(engine)
        let terminal = try sandbox.shell(database)
        // What it did, not a raw return value.
        terminal.send("DELETE FROM telemetry WHERE event = 'alpha';\r")
        terminal.expect("committed: telemetry: 1 deleted")
        terminal.expect("> ")
        #expect(try database.count("telemetry") == 2)
        if engine == .sqlite {
            // Taken back as a Lua chunk's write is (PostgreSQL has no undo()).
            terminal.send("undo()\r")
            terminal.expect("undoes chunk 1 (DELETE FROM telemetry WHERE event = 'alpha';)")
            terminal.expect("> ")
            #expect(try database.count("telemetry") == 3)
        }
        let before = try database.count("telemetry")
        // The question before a chunk that changes more than .confirm rows;
        // no rolls back.
        terminal.send(".confirm 1\r")
        terminal.expect("> ")
        terminal.send("UPDATE telemetry\r")
        terminal.expect("  ... ")
        terminal.send("SET event = 'x';\r")
        terminal.expect("this chunk changes \(before) rows")
        terminal.expect("commit? [y/N] ")
        terminal.send("n\r")
        terminal.expect("rolled back: nothing was changed")
        terminal.expect("> ")
        #expect(try database.count("telemetry", where: "event = 'x'") == 0)
        // Control: the same answered yes commits.
        terminal.send("UPDATE telemetry SET event = 'x';\r")
        terminal.expect("commit? [y/N] ")
        terminal.send("y\r")
        terminal.expect("committed: telemetry: \(before) updated")
        terminal.expect("> ")
        #expect(try database.count("telemetry", where: "event = 'x'") == before)
        // A write that matched nothing says so.
        terminal.send("DELETE FROM telemetry WHERE event = 'none';\r")
        terminal.expect("no rows changed")
        terminal.expect("> ")
        // Transaction control is the session's to refuse, with its reason.
        terminal.send("BEGIN;\r")
        terminal.expect("transaction control (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE) is not run through db")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    /// A chunk typed as SQL is audited as the operator typed it, as a Lua
    /// chunk is.
    @Test(arguments: Engine.allCases) func sqlAtThePromptIsAudited(_ engine: Engine) throws {
        let (sandbox, database) = try seeded(engine)
        let terminal = try sandbox.shell(database)
        terminal.send("DELETE FROM telemetry WHERE event = 'bravo';\r")
        terminal.expect("committed: telemetry: 1 deleted")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
        let audited = try database.sql("SELECT count(*) FROM opsh_audit WHERE code LIKE '%DELETE FROM telemetry WHERE event = ''bravo'';%'")
        #expect(audited == "1", "\(audited)")
    }
}
