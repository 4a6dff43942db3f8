import Foundation
import Testing

/// Errors at their position (issue 26): an SQL error at the prompt shows
/// the line of SQL with a caret under the place the engine names
/// (SQLite's `sqlite3_error_offset`, PostgreSQL's `position`), drawn by one
/// renderer; a traceback only when it reaches a function the operator
/// wrote (`.traceback on`: all). One body, both engines.
@Suite struct ErrorPositionTests {
    @Test(arguments: Engine.allCases) func anSQLErrorShowsACaretUnderItsPlace(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        // Typed as SQL: LIMT is taken as the table's alias, so both engines
        // stop at the 3.
        terminal.send("SELECT id FROM telemetry LIMT 3;\r")
        terminal.expect("LINE 1: SELECT id FROM telemetry LIMT 3\n" + String(repeating: " ", count: 38) + "^")
        terminal.expect("> ")
        // Through db.query, on the second line of the SQL.
        terminal.send("db.query('SELECT id,\\n  nosuchcolumn FROM telemetry')\r")
        terminal.expect("LINE 2:   nosuchcolumn FROM telemetry\n" + String(repeating: " ", count: 10) + "^")
        terminal.expect("> ")
        // Control: an error with no place in SQL draws no caret.
        terminal.send("error('no place')\r")
        terminal.expect("no place")
        terminal.expect("> ")
        #expect(terminal.transcript.components(separatedBy: "^").count == 3, "\(terminal.transcript)")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    @Test(arguments: Engine.allCases) func aTracebackOnlyWhenItReachesTheOperatorsCode(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        // The typed line and opsh's own functions: the message says it all.
        terminal.send("error('at the prompt')\r")
        terminal.expect("at the prompt")
        terminal.expect("> ")
        terminal.send("db.query('SELECT * FROM nosuchtable')\r")
        terminal.expect("nosuchtable")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("stack traceback"), "\(terminal.transcript)")
        // Through a function the operator wrote: the traceback names it.
        terminal.send("function deeper() error('in my function') end\r")
        terminal.expect("> ")
        terminal.send("deeper()\r")
        terminal.expect("in my function")
        terminal.expect("stack traceback")
        terminal.expect("deeper")
        terminal.expect("> ")
        // .traceback on: every one.
        terminal.send(".traceback on\r")
        terminal.expect("> ")
        terminal.send("error('at the prompt again')\r")
        terminal.expect("at the prompt again")
        terminal.expect("stack traceback")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }
}
