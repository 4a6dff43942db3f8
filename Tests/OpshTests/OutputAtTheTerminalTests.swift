import Foundation
import Testing

/// How results are shown at the prompt (issue 26, "The prompt operators
/// already know"), through a real pty: a pager for what is taller than
/// the screen, columns that share the terminal's width (read again after
/// a resize), and one way to show counts, empty results and row sets.
/// One body, both engines: the shell shows either engine's rows alike.
@Suite struct OutputAtTheTerminalTests {
    static let sixtyRows = "return db.query('WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60) SELECT i AS id FROM n')"

    /// A $PAGER that records each call and what it was given.
    func recordingPager(_ sandbox: Sandbox) throws -> (command: String, calls: String, paged: String) {
        let calls = sandbox.root + "/pager-calls", paged = sandbox.root + "/paged"
        let command = try sandbox.script("pager.sh", """
            #!/bin/sh
            cat >> '\(paged)'
            echo called >> '\(calls)'
            """)
        // Run by sh, not exec'd: a file another test's fork still holds
        // open for writing cannot be exec'd ("Text file busy"), only read.
        return ("/bin/sh " + command, calls, paged)
    }

    func contents(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    func shell(_ sandbox: Sandbox, _ database: TestDatabase, environment: [String: String] = [:],
               rows: Int = 24, columns: Int = 100) throws -> PseudoTerminal {
        let terminal = try PseudoTerminal(arguments: ["--db", database.db],
                                          environment: sandbox.environment.merging(environment) { $1 }, rows: rows, columns: columns)
        terminal.expect("> ")
        return terminal
    }

    @Test(arguments: Engine.allCases) func outputTallerThanTheScreenGoesThroughThePager(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let pager = try recordingPager(sandbox)
        let terminal = try shell(sandbox, database, environment: ["PAGER": pager.command, "TERM": "xterm"])
        terminal.send(Self.sixtyRows + "\r")
        #expect(waitUntil(30) { contents(pager.calls) == "called\n" }, "the pager was not called: \(terminal.transcript)")
        terminal.expect("> ")
        #expect(contents(pager.paged).contains("│ 60 │") && contents(pager.paged).contains("(60 rows)"))
        #expect(!terminal.transcript.contains("│ 60 │"), "the rows went to the terminal too")
        // What fits the screen is printed as before.
        terminal.send("return 6 * 7\r")
        terminal.expect("42")
        terminal.expect("> ")
        // help() prints through the same pager.
        terminal.send("help()\r")
        #expect(waitUntil(30) { contents(pager.calls) == "called\ncalled\n" }, "help() did not page: \(terminal.transcript)")
        terminal.expect("> ")
        #expect(contents(pager.paged).contains("db.query("))
        // .pager off: the same result on the terminal, the pager not called.
        terminal.send(".pager off\r")
        terminal.expect("> ")
        terminal.send(Self.sixtyRows + "\r")
        terminal.expect("│ 60 │")
        terminal.expect("(60 rows)")
        terminal.expect("> ")
        // .pager on: even what fits.
        terminal.send(".pager on\r")
        terminal.expect("> ")
        terminal.send("return 6 * 7\r")
        #expect(waitUntil(30) { contents(pager.calls) == "called\ncalled\ncalled\n" }, "\(terminal.transcript)")
        terminal.expect("> ")
        terminal.send(".pager\r")
        terminal.expect("on (\(pager.command))")
        terminal.send(".pager sometimes\r")
        terminal.expect("usage: .pager auto|on|off")
        terminal.expect("> ")
    }

    /// The pager shows a chunk's output once the chunk has ended: a pager
    /// left open at 3 a.m. holds no transaction. The pager here waits to
    /// be released; meanwhile another process sees the chunk's row (the
    /// control: the same row written by the chunk is there at all).
    @Test(arguments: Engine.allCases) func thePagerRunsAfterTheChunkHasCommitted(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let started = sandbox.root + "/pager-started", release = sandbox.root + "/pager-release"
        let pager = try sandbox.script("waiting-pager.sh", """
            #!/bin/sh
            cat > /dev/null
            touch '\(started)'
            while [ ! -e '\(release)' ]; do sleep 0.05; done
            """)
        chmod(pager, 0o755)
        let terminal = try shell(sandbox, database, environment: ["PAGER": pager, "TERM": "xterm"])
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('paged', 0)\"); " + Self.sixtyRows + "\r")
        #expect(waitUntil(30) { FileManager.default.fileExists(atPath: started) }, "\(terminal.transcript)")
        #expect(try database.count("telemetry", where: "event = 'paged'") == 1, "the chunk had not committed when the pager ran")
        FileManager.default.createFile(atPath: release, contents: nil)
        terminal.expect("> ")
        terminal.send("return 6 * 7\r")
        terminal.expect("42")
    }

    /// A $PAGER that does not exist costs nothing: the shell says so (sh's
    /// own message) and the rows are printed on the terminal.
    @Test(arguments: Engine.allCases) func aMissingPagerStillShowsTheOutput(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try shell(sandbox, database, environment: ["PAGER": "no-such-pager-here", "TERM": "xterm"])
        terminal.send(Self.sixtyRows + "\r")
        terminal.expect("no-such-pager-here")
        terminal.expect("│ 60 │")
        terminal.expect("(60 rows)")
        terminal.expect("> ")
    }

    /// Only a terminal is paged: `opsh -e` into a pipe prints every row,
    /// whatever PAGER says (the control: the same rows, no pager).
    @Test(arguments: Engine.allCases) func aPipeIsNeverPaged(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let pager = try recordingPager(sandbox)
        let result = try sandbox.opsh(["-e", Self.sixtyRows], on: database,
                                      environment: ["PAGER": pager.command, "TERM": "xterm"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("60"))
        #expect(contents(pager.calls).isEmpty)
    }

    /// The default pager, `less -SRFX`, on the real terminal: `q` and
    /// Ctrl-C there go back to the prompt, which works as before: no chunk
    /// reported interrupted, no second prompt.
    @Test(arguments: Engine.allCases) func lessShowsTheFirstScreenAndQuitsBackToThePrompt(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try shell(sandbox, database, environment: ["TERM": "xterm"])
        terminal.send(Self.sixtyRows + "\r")
        terminal.expect("│ 10 │")
        #expect(!terminal.sees("│ 60 │", timeout: 1), "less showed more than a screen")
        terminal.send("q")
        terminal.expect("> ")
        terminal.send("return 6 * 7\r")
        terminal.expect("42")
        terminal.expect("> ")
        // Ctrl-C in the pager (less drops what was typed ahead of it when
        // it handles the interrupt: q is sent until it is read), then q.
        terminal.send(Self.sixtyRows + "\r")
        terminal.expect("│ 10 │")
        terminal.send("\u{3}")
        let back = waitUntil(30) {
            terminal.send("q")
            return terminal.sees("> ", timeout: 0.5)
        }
        #expect(back, "\(terminal.transcript)")
        // A q that arrived after less had gone is on the prompt's line: Ctrl-U clears it.
        terminal.send("\u{15}return 6 * 7\r")
        terminal.expect("42")
        terminal.expect("> ")
        let after = terminal.transcript
        #expect(!after.contains("interrupted") && !after.contains("rolled back"), "\(after)")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    /// Columns share the terminal's width, long values cut with `…`; the
    /// width is read again after the window is resized; a row that cannot
    /// fit at all comes one record at a time.
    @Test(arguments: Engine.allCases) func columnsShareTheWidthAndFollowAResize(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try shell(sandbox, database, rows: 40, columns: 80)
        let a = String(repeating: "a", count: 60), b = String(repeating: "b", count: 60)
        let wide = "return db.query(\"SELECT 1 AS id, '\(a)' AS first, '\(b)' AS second\")\r"
        terminal.send(wide)
        terminal.expect("(1 row)")
        terminal.expect("> ")
        let narrow = tableLines(terminal.transcript)
        #expect(!narrow.isEmpty)
        for line in narrow { #expect(line.count <= 80, "\(line.count) columns: \(line)") }
        #expect(narrow.contains { $0.contains("a…") && $0.contains("b…") }, "\(narrow)")
        // Both long columns get a fair share, not the first all of it.
        let row = narrow.first { $0.contains("a…") } ?? ""
        let shares = row.split(separator: "│").map { $0.filter { $0 == "a" || $0 == "b" }.count }.filter { $0 > 0 }
        #expect(shares.count == 2 && abs(shares[0] - shares[1]) <= 1, "\(row)")
        // The window grows: the next result uses the new width.
        terminal.resize(rows: 40, columns: 200)
        let mark = terminal.transcript.count
        terminal.send(wide)
        terminal.expect("(1 row)")
        terminal.expect("> ")
        let roomy = String(terminal.transcript.dropFirst(mark))
        #expect(roomy.contains(a) && roomy.contains(b), "\(roomy)")
        // Too many columns for 40: one record at a time, values whole.
        terminal.resize(rows: 40, columns: 40)
        terminal.send("return db.query(\"SELECT 1 AS id, '\(a)' AS first, '\(b)' AS second, 'cccccccccccc' AS third, 'dddddddddddd' AS fourth\")\r")
        terminal.expect("-[ RECORD 1 ]")
        terminal.expect("first  | \(a)")
        terminal.expect("(1 row)")
    }

    /// A window resized while the prompt waits: readline learns the new
    /// width at once (SIGWINCH), so a line longer than the window wraps at
    /// its new edge and Ctrl-A goes to the line's real start. Before,
    /// readline kept the old width and put the typed `XYZ` mid-line. Drawn
    /// by tmux, as the operator's terminal draws it.
    @Test(arguments: Engine.allCases) func theLineBeingTypedFollowsAResize(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let screen = try TmuxScreen(arguments: ["--db", database.db], environment: sandbox.environment.merging(["TERM": "xterm"]) { $1 },
                                    rows: 20, columns: 100)
        #expect(screen.waitForLine { $0.hasSuffix("> ") || $0.hasSuffix(">") }, "no prompt: \((try? screen.screen()) ?? [])")
        try screen.resize(rows: 20, columns: 40)
        let long = "print('" + String(repeating: "a", count: 60) + String(repeating: "b", count: 26) + "')"
        try screen.send(long, literal: true)
        #expect(screen.waitForLine { $0.hasSuffix("bb')") }, "\((try? screen.screen()) ?? [])")
        try screen.send("C-a")
        try screen.send("XYZ", literal: true)
        // The typed text lands at the start of the line, after the prompt.
        let landed = screen.waitForLine { $0.contains("> XYZprint('") }
        #expect(landed, "XYZ did not land at the line's start:\n\(((try? screen.screen()) ?? []).joined(separator: "\n"))")
        // And the line runs as typed there.
        try screen.send("C-k")
        try screen.send("C-u")
        try screen.send("return 6 * 7", literal: true)
        try screen.send("Enter")
        #expect(screen.waitForLine { $0 == "42" }, "\((try? screen.screen()) ?? [])")
    }

    /// `opsh runs` at an 80-column terminal cuts the script's path (and
    /// the changes) with `…` so the status stays on screen; into a pipe
    /// every path is whole (the control).
    @Test(arguments: Engine.allCases) func opshRunsFitsTheTerminal(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        // A run is recorded when it changed something.
        let script = try sandbox.script(String(repeating: "a-long-script-name-", count: 6) + ".lua",
                                        "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('x', 0)\")")
        let ran = try sandbox.opsh(["run", script], on: database)
        #expect(ran.status == 0, "\(ran.stderr)")
        let terminal = try PseudoTerminal(arguments: ["runs", "--db", database.db], environment: sandbox.environment, rows: 24, columns: 80)
        #expect(terminal.waitForExit() == 0)
        let lines = terminal.transcript.split(separator: "\n").map(String.init).filter { !$0.isEmpty }
        #expect(lines.count == 2, "\(terminal.transcript)")
        for line in lines { #expect(line.count <= 80, "\(line.count) columns: \(line)") }
        #expect(lines.last?.hasSuffix("  0") == true && lines.last?.contains("…") == true, "\(lines)")
        let piped = try sandbox.opsh(["runs"], on: database)
        #expect(piped.status == 0 && piped.stdout.contains(script), "\(piped.stdout)")
    }

    /// The lines of box-drawn tables in `text`.
    func tableLines(_ text: String) -> [String] {
        text.split(separator: "\n").map(String.init).filter { $0.hasPrefix("│") || $0.hasPrefix("┌") || $0.hasPrefix("└") }
    }

    /// Empty results look alike, the count line is printed once, and
    /// print() of a row set shows its rows.
    @Test(arguments: Engine.allCases) func oneWayToShowRows(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try shell(sandbox, database, rows: 40, columns: 120)
        terminal.send("return db.query('SELECT 1 AS a WHERE 1 = 0')\r")
        terminal.expect("│ a │")
        terminal.expect("(0 rows)")
        terminal.expect("> ")
        terminal.send("return builds.list{ where = { status = 'failed' } }\r")
        terminal.expect("(0 rows)")
        terminal.expect("> ")
        terminal.send(".rows 5\r")
        terminal.expect("> ")
        let mark = terminal.transcript.count
        terminal.send(Self.sixtyRows + "\r")
        terminal.expect("(showing the first 5 of 60 rows: .rows all shows every row here")
        terminal.expect("> ")
        let shown = String(terminal.transcript.dropFirst(mark))
        #expect(!shown.contains("(5 rows)"), "two count lines: \(shown)")
        terminal.send("print(db.query('SELECT 7 AS seven'))\r")
        terminal.expect("│ seven │")
        terminal.expect("│     7 │")
        terminal.expect("(1 row)")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("opsh.rows: 0x"))
        // A watch handle says what it watches, in a list too.
        terminal.send("w = watch('SELECT count(*) AS n FROM telemetry', function() end)\r")
        terminal.expect("> ")
        terminal.send("return opsh.watches()\r")
        terminal.expect("watch(SELECT count(*) AS n FROM telemetry)")
        terminal.expect("> ")
        // Other values print as Lua prints them.
        terminal.send("print('x', 1, nil, true)\r")
        terminal.expect("x\t1\tnil\ttrue")
        terminal.expect("> ")
    }
}
