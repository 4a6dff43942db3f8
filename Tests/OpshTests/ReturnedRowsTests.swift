import Foundation
import Testing

/// `opsh --csv|--tsv -e "return db.query(…)"` (issue 26): rows the chunk
/// returns go from the statement to stdout without a Lua table per row
/// (Bindings' ReturnedRows), byte for byte what the printer writes from a
/// row set; any other use of a query's rows builds them as before.
@Suite struct ReturnedRowsTests {
    /// Awkward values: quotes, separators, line breaks, a backslash, NUL,
    /// control characters, bytes that are not UTF-8, UTF-8, NULL beside
    /// the empty string, floats Lua writes its own way, the extreme
    /// integers, and a secret.
    static func awkwardRows(_ engine: Engine) -> String {
        let nul = engine == .sqlite ? "'a' || char(0) || 'b'" : "'a<nul>b'"
        let escape = engine == .sqlite ? "'bell' || char(7) || ' esc' || char(27) || '[31m cr' || char(13)" : "'bell' || chr(7) || ' esc' || chr(27) || '[31m cr' || chr(13)"
        let bytes = engine == .sqlite ? "CAST(x'ff00fe41' AS TEXT)" : "'not utf-8 on PostgreSQL'"
        return """
            SELECT 1 AS id, 'a,b' AS comma, 'say "hi"' AS quote, 'two
            lines' AS lines, 'tab\there \\ back' AS tab, \(nul) AS nul, \(escape) AS controls,
            \(bytes) AS bytes, 'héllo wörld ✓' AS utf8, NULL AS missing, '' AS empty,
            CAST(1 AS DOUBLE PRECISION) AS whole, CAST(0.1 AS DOUBLE PRECISION) AS tenth, CAST(1e300 AS DOUBLE PRECISION) AS huge, CAST(-2.5e-7 AS DOUBLE PRECISION) AS tiny,
            9223372036854775807 AS biggest, -9223372036854775807 - 1 AS smallest, 's3cr3t-value-1234' AS token
            UNION ALL
            SELECT 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'x', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
            """
    }

    /// The rows written straight from the statement are the rows the
    /// printer writes from a row set kept in a local first.
    @Test(arguments: Engine.allCases) func streamedRowsAreThePrintersBytes(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let sql = Self.awkwardRows(engine)
        for mode in ["--csv", "--tsv"] {
            let streamed = try sandbox.opsh([mode, "-e", "return db.query([==[\(sql)]==])"], on: database)
            let kept = try sandbox.opsh([mode, "-e", "local rows = db.query([==[\(sql)]==]) return rows"], on: database)
            #expect(streamed.status == 0 && kept.status == 0, "\(streamed.stderr) \(kept.stderr)")
            #expect(streamed.stdout == kept.stdout, "\(mode)\n\(streamed.stdout)\n---\n\(kept.stdout)")
            #expect(streamed.stdout.contains("••••1234") && !streamed.stdout.contains("s3cr3t"), "\(streamed.stdout)")
            #expect(!streamed.stdout.contains("\u{1B}") && streamed.stdout.contains("␛"), "\(streamed.stdout)")
            #expect(streamed.stdout.contains("1e+300") && streamed.stdout.contains("1.0") && streamed.stdout.contains("-9223372036854775808"),
                    "\(streamed.stdout)")
        }
        let csv = try sandbox.opsh(["--csv", "-e", "return db.query([==[\(sql)]==])"], on: database)
        #expect(csv.stdout.contains("1,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",tab\there \\ back,"), "\(csv.stdout)")
    }

    /// No Lua table per row: under a memory limit far below what 200,000
    /// rows take as tables, the returned rows are all written; kept in a
    /// local first (the control), the same query passes the limit.
    /// SQLite only: PostgreSQL's rows are read whole by its row path.
    @Test func returnedRowsAreNotBuiltAsTables() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        let query = "[[WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) SELECT i AS id, 'event ' || i AS event FROM n]]"
        let streamed = try sandbox.opsh(["--memory-limit", "16", "--csv", "-e", "return db.query(\(query))"], on: database)
        #expect(streamed.status == 0, "\(streamed.stderr)")
        let lines = streamed.stdout.split(separator: "\n")
        #expect(lines.count == 200_001 && lines.first == "id,event" && lines.last == "200000,event 200000", "\(lines.prefix(2)) … \(lines.suffix(1))")
        let kept = try sandbox.opsh(["--memory-limit", "16", "--csv", "-e", "local rows = db.query(\(query)) return rows"], on: database)
        #expect(kept.status == 1 && kept.stderr.contains("memory"), "\(kept.status) \(kept.stderr)")
    }

    /// A statement that fails after rows were written: the run fails with
    /// the statement's error (exit status 1), not a success.
    @Test(arguments: Engine.allCases) func aFailureMidwayFailsTheRun(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let failing = engine == .sqlite ? "CASE WHEN i < 5000 THEN i ELSE json('{' || i) END"
            : "CASE WHEN i < 5000 THEN i::text ELSE (('{' || i)::json)::text END"
        let sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000) SELECT \(failing) AS value FROM n"
        let result = try sandbox.opsh(["--csv", "-e", "return db.query([==[\(sql)]==])"], on: database)
        #expect(result.status == 1, "\(result.status) \(result.stderr)")
        #expect(result.stderr.lowercased().contains("json"), "\(result.stderr)")
        #expect(!result.stdout.contains("5000\n"), "\(result.stdout.suffix(100))")
    }

    /// Past two seconds an export shows its progress on the terminal
    /// (stderr), not in stdout's file, and erases it when done.
    /// SQLite only: PostgreSQL's rows are read whole before they are
    /// written.
    @Test func progressOnTheTerminalNotInTheFile() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        let output = sandbox.root + "/export.csv"
        // About 0.5 ms a row: several seconds of rows.
        let query = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000) SELECT i AS id, length(hex(randomblob(100000))) AS size FROM n"
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--csv", "-e", "return db.query([==[\(query)]==])"],
                                          environment: sandbox.environment, standardOutput: output)
        #expect(terminal.expect("export", timeout: 60))
        let status = terminal.waitForExit(timeout: 120)
        #expect(status == 0, "\(terminal.transcript)")
        #expect(terminal.rawTranscript.contains(" rows/s") && terminal.rawTranscript.hasSuffix("\r\u{1B}[K"), "\(terminal.rawTranscript.debugDescription)")
        let written = try String(contentsOfFile: output, encoding: .utf8)
        let lines = written.split(separator: "\n")
        #expect(lines.count == 10_001 && lines.first == "id,size" && lines.last == "10000,200000", "\(lines.prefix(2)) … \(lines.suffix(1))")
        #expect(!written.contains("export") && !written.contains("\u{1B}"))
        // Control: a short export shows nothing.
        let short = try PseudoTerminal(arguments: ["--db", database.db, "--csv", "-e", "return db.query('SELECT 1 AS one')"],
                                       environment: sandbox.environment, standardOutput: output)
        #expect(short.waitForExit(timeout: 60) == 0)
        #expect(!short.rawTranscript.contains("export"), "\(short.rawTranscript.debugDescription)")
    }

    /// Results that are not streamed (`--json`, PostgreSQL's rows) still
    /// show, past 2 s, the rows read so far on the terminal, never in the
    /// file, erased at the end; a short run shows nothing (the control).
    @Test(arguments: Engine.allCases) func rowsBeingReadShowOnTheTerminalNotInTheFile(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let output = sandbox.root + "/export.json"
        // Slow rows: a few seconds to read on either engine.
        let query = engine == .sqlite
            ? "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000) SELECT i AS id, length(hex(randomblob(100000))) AS size FROM n"
            : "SELECT i AS id, (SELECT 200000 FROM pg_sleep(0.0004 + i * 0)) AS size FROM generate_series(1, 10000) AS i"
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--json", "-e", "return db.query([==[\(query)]==])"],
                                          environment: sandbox.environment, standardOutput: output)
        #expect(terminal.expect("reading", timeout: 60))
        #expect(terminal.waitForExit(timeout: 120) == 0, "\(terminal.transcript)")
        #expect(terminal.rawTranscript.contains(" rows/s") && terminal.rawTranscript.hasSuffix("\r\u{1B}[K"),
                "\(terminal.rawTranscript.debugDescription)")
        let written = try String(contentsOfFile: output, encoding: .utf8)
        #expect(written.hasPrefix("[") && written.contains("\"id\":10000") && !written.contains("reading") && !written.contains("\u{1B}"),
                "\(written.prefix(200))")
        let short = try PseudoTerminal(arguments: ["--db", database.db, "--json", "-e", "return db.query('SELECT 1 AS one')"],
                                       environment: sandbox.environment, standardOutput: output)
        #expect(short.waitForExit(timeout: 60) == 0)
        #expect(!short.rawTranscript.contains("reading"), "\(short.rawTranscript.debugDescription)")
    }
}
