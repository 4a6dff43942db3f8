import Foundation
import Testing

/// What the prompt shows (issue 26, "One way to show things"): a write
/// typed at the prompt says what it did, from the engine's own counts,
/// instead of `db.exec`'s raw values; scripts and `opsh -e` keep the
/// values. One body, both engines, through a real pty.
@Suite struct PromptSaysWhatItDidTests {
    func shell(_ sandbox: Sandbox, _ database: TestDatabase) throws -> PseudoTerminal {
        let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        terminal.expect("> ")
        return terminal
    }

    /// Lines of what the shell printed that are numbers alone (`3`, `3\t19`):
    /// db.exec's raw values.
    static func bareNumberLines(_ text: Substring) -> [Substring] {
        text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }).filter { line in
            !line.isEmpty && line.allSatisfy { $0.isNumber || $0 == "\t" || $0 == " " }
        }
    }

    @Test(arguments: Engine.allCases) func aWriteAtThePromptSaysWhatItDid(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('gone', 1), ('gone', 2), ('gone', 3), ('kept', 4)")
        let terminal = try shell(sandbox, database)
        let before = terminal.transcript.count

        terminal.send("db.exec(\"DELETE FROM telemetry WHERE event = 'gone'\")\r")
        terminal.expect("3 rows deleted from telemetry")
        terminal.expect("committed: telemetry: 3 deleted")
        terminal.expect("> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('new', 5)\")\r")
        terminal.expect("1 row inserted into telemetry")
        terminal.expect("> ")
        terminal.send("db.exec [[UPDATE telemetry SET event = 'seen']]\r")
        terminal.expect("2 rows updated in telemetry")
        terminal.expect("> ")
        terminal.send("db.exec(\"DELETE FROM telemetry WHERE event = 'nothing'\")\r")
        terminal.expect("done: no rows changed")
        terminal.expect("> ")
        // Not a one-table write: what the engine says it changed.
        terminal.send("db.exec('CREATE TABLE notes (id INTEGER PRIMARY KEY)')\r")
        terminal.expect("type the table's name to commit")
        terminal.send("notes\r")
        terminal.expect("created table notes")
        terminal.expect("> ")
        let shown = terminal.transcript.dropFirst(before)
        #expect(Self.bareNumberLines(Substring(shown)).isEmpty, "db.exec's raw values were shown:\n\(terminal.transcript)")

        // Statements return nothing: the commit's note alone, as before.
        let statements = terminal.transcript.count
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('two', 6)\"); db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('two', 7)\")\r")
        terminal.expect("committed: telemetry: 2 inserted")
        terminal.expect("> ")
        #expect(!terminal.transcript.dropFirst(statements).contains("rows inserted into"), "\(terminal.transcript)")

        // The control: a chunk that uses the values gets the numbers, and
        // shows them when it returns them.
        terminal.send("local n = db.exec(\"DELETE FROM telemetry WHERE event = 'seen'\")\r")
        terminal.expect("committed: telemetry: 2 deleted")
        terminal.expect("> ")
        terminal.send("n * 10\r")
        terminal.expect("20")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)

        // opsh -e returns the values as it did.
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('batch', 1), ('batch', 2)")
        let batch = try sandbox.opsh(["-e", "return db.exec(\"DELETE FROM telemetry WHERE event = 'batch'\")"], on: database)
        #expect(batch.status == 0, "\(batch.stderr)")
        #expect(batch.stdout.hasPrefix("2"), "\(batch.stdout)")
        #expect(!batch.stdout.contains("deleted from"), "\(batch.stdout)")
    }
}
