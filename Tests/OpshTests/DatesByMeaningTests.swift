import Foundation
import Testing

/// Dates by a column's declared meaning, not its name (issue 26, "One way
/// to show things"): the schema declares which columns hold seconds since
/// 1970, the engine says which table column a result column comes from
/// (SQLite's column metadata, PostgreSQL's RowDescription), and the prompt
/// shows those as dates. `42 AS endDate` stays 42; `created_at AS latest`
/// is a date; a table of the operator's own keeps its numbers. One body,
/// both engines, through a real pty.
@Suite struct DatesByMeaningTests {
    static let seconds = "1795704090.5"
    static let date = "2026-11-26 14:41:30Z"

    @Test(arguments: Engine.allCases) func datesComeFromTheSchemaNotTheName(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('x', \(Self.seconds))")
        // The control: the same value in a column nobody declared a date.
        let real = engine == .sqlite ? "REAL" : "double precision"
        try database.sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, createdAt \(real)); INSERT INTO notes (id, createdAt) VALUES (1, \(Self.seconds))")
        let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        terminal.expect("> ")

        var before = terminal.transcript.count
        terminal.send("db.query('SELECT created_at AS latest, 42 AS endDate, event FROM telemetry')\r")
        terminal.expect("latest")
        terminal.expect(Self.date)
        terminal.expect("(1 row)")
        var shown = String(terminal.transcript.dropFirst(before))
        #expect(shown.range(of: #"[│|]\s+42 [│|]"#, options: .regularExpression) != nil, "42 AS endDate is a number:\n\(shown)")
        #expect(!shown.contains("1970-01-01"), "\(shown)")

        // SQL at the prompt takes the same row path.
        terminal.send("SELECT created_at FROM telemetry;\r")
        terminal.expect(Self.date)
        terminal.expect("(1 row)")
        before = terminal.transcript.count
        terminal.send("SELECT createdAt FROM notes;\r")
        terminal.expect("(1 row)")
        shown = String(terminal.transcript.dropFirst(before))
        #expect(shown.contains(Self.seconds) && !shown.contains(Self.date), "a column without the meaning keeps its number:\n\(shown)")

        // An aggregate has no table column behind it (neither engine names
        // one): its value is a number, whatever its name.
        before = terminal.transcript.count
        terminal.send("SELECT max(created_at) AS latest FROM telemetry;\r")
        terminal.expect("(1 row)")
        shown = String(terminal.transcript.dropFirst(before))
        #expect(shown.contains(Self.seconds) && !shown.contains(Self.date), "\(shown)")

        // What the repositories know: config.get() and audit.list().
        terminal.send("config.save{ base_url = 'https://a.example', created_at = \(Self.seconds), updated_at = \(Self.seconds) }\r")
        terminal.expect("> ")
        terminal.send("config.get()\r")
        terminal.expect("created_at = \(Self.date)")
        terminal.expect("> ")
        before = terminal.transcript.count
        terminal.send("audit.list{ limit = 1 }\r")
        terminal.expect("startedAt = ")
        terminal.expect("> ")
        shown = String(terminal.transcript.dropFirst(before))
        #expect(shown.range(of: #"startedAt = 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ"#, options: .regularExpression) != nil, "\(shown)")
        // Lua literals stay Lua.
        terminal.send(".mode lua\r")
        terminal.expect("> ")
        terminal.send("config.get()\r")
        terminal.expect("created_at = \(Self.seconds)")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)

        // CSV, TSV and JSON keep numbers.
        let query = "return db.query(\"SELECT created_at FROM telemetry WHERE event = 'x'\")"
        let csv = try sandbox.opsh(["--csv", "-e", query], on: database)
        #expect(csv.stdout == "created_at\n\(Self.seconds)\n", "\(csv.stdout)\(csv.stderr)")
        let json = try sandbox.opsh(["--json", "-e", query], on: database)
        #expect(json.stdout.contains("\(Self.seconds)") && !json.stdout.contains("2026-"), "\(json.stdout)\(json.stderr)")
    }
}
