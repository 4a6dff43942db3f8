import Foundation
import Testing

/// Transaction control sent by a script never commits what opsh's
/// transaction did, on either engine, and is refused with the reason
/// (issue 24, items 17, 18 and 25; ARCHITECTURE.md, decision 5 and
/// "PostgreSQL: the session"). SQLite refuses the statement before it
/// runs and the transaction goes on; PostgreSQL's server refuses to commit
/// opsh's transaction (its commit guard) and rolls it back whole. Either
/// way nothing the transaction did is kept, and the script is told why.
@Suite struct TransactionControlTests {
    static let refusal = "transaction control (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE) is not run through db"

    /// Spellings both engines parse: case, comments, synonyms, a script of
    /// several statements.
    static let spellings = [
        "COMMIT", "END", "/* done */ CoMmIt", "-- why not\ncommit;", "END TRANSACTION", "ROLLBACK",
        "rollback transaction", "BEGIN", "SAVEPOINT x", "RELEASE x", "ROLLBACK TO x",
        "DELETE FROM telemetry; COMMIT",
    ]

    /// For each SQL text of the JSON list named by its argument, from one
    /// telemetry row:
    /// inside db.transaction, delete the row, send the text (its error
    /// caught; with OPSH_TEST_NESTED=1 from a nested db.transaction), then
    /// fail (unless OPSH_TEST_KEEP=1). Prints
    /// one line per text: the rows left once the transaction is over, and
    /// the error the text got ("ran" when it got none).
    static let attempt = """
        local file = assert(io.open(arg[1]))
        local texts = json.decode(file:read('a'))
        file:close()
        for i, sql in ipairs(texts) do
          -- Each text starts from the one row, whatever the one before did.
          if db.value('SELECT count(*) FROM telemetry') == 0 then
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)")
          end
          local outcome
          pcall(db.transaction, function()
            db.exec('DELETE FROM telemetry')
            local function send()
              local ok, err = pcall(db.exec, sql)
              outcome = ok and 'ran' or tostring(err)
            end
            if os.getenv('OPSH_TEST_NESTED') == '1' then db.transaction(send) else send() end
            if os.getenv('OPSH_TEST_KEEP') ~= '1' then error('fails later', 0) end
          end)
          print(i .. '\\t' .. db.value('SELECT count(*) FROM telemetry') .. '\\t' .. outcome:gsub('\\n', ' '))
        end
        """

    /// Runs ``attempt`` with `texts`: each text's rows left and outcome.
    static func attempts(_ texts: [String], on db: TestDatabase, in folder: Sandbox, keep: Bool = false, nested: Bool = false,
                         timeout: Int = 120) throws -> [(rows: Int, outcome: String)] {
        let script = try folder.script("attempt.lua", attempt)
        // In a file, not as the script's arguments: the list is long.
        let list = folder.root + "/scripts/texts.json"
        try JSONSerialization.data(withJSONObject: texts).write(to: URL(fileURLWithPath: list))
        let run = try folder.opsh(["run", "--timeout", String(timeout), script, list], on: db,
                                  environment: ["OPSH_TEST_KEEP": keep ? "1" : "0", "OPSH_TEST_NESTED": nested ? "1" : "0"])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map { $0.split(separator: "\t", maxSplits: 2).map(String.init) }
        #expect(lines.count == texts.count, "\(run.stdout)\n\(run.stderr)")
        return lines.map { fields in (fields.count > 1 ? Int(fields[1]) ?? -1 : -1, fields.count > 2 ? fields[2] : "") }
    }

    @Test(arguments: Engine.allCases)
    func insideATransactionNothingIsCommitted(_ engine: Engine) throws {
        let folder = try Sandbox()
        let db = try folder.createdDatabase(engine)
        try db.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)")
        let results = try Self.attempts(Self.spellings, on: db, in: folder)
        for (sql, result) in zip(Self.spellings, results) {
            #expect(result.rows == 1, "\(engine) \(sql.debugDescription) committed the delete: \(result.outcome)")
            #expect(result.outcome.contains(Self.refusal), "\(engine) \(sql.debugDescription): \(result.outcome)")
        }
        #expect(try db.count("telemetry") == 1)
        // Control: the same route with a harmless statement, and no failure
        // after it: the delete lands.
        let control = try Self.attempts(["SELECT 1"], on: db, in: folder, keep: true)
        #expect(control.first?.outcome == "ran")
        #expect(control.first?.rows == 0)
        #expect(try db.count("telemetry") == 0)
    }

    /// The property, over generated strings of transaction control and
    /// harmless statements (case, comments, separators, several
    /// statements): whatever a string is, what db.transaction did before
    /// it is never committed; a string of harmless statements runs; one
    /// with transaction control is refused with the reason. Each engine
    /// also gets its own spellings (PostgreSQL's AND CHAIN, ABORT,
    /// PREPARE TRANSACTION, opsh's savepoints by name; SQLite's BEGIN
    /// IMMEDIATE). `OPSH_GUARD_SEED` and `OPSH_GUARD_CASES` vary it.
    @Test(arguments: Engine.allCases)
    func generatedStringsNeverCommitOpshsTransaction(_ engine: Engine) throws {
        let folder = try Sandbox()
        let db = try folder.createdDatabase(engine)
        var generator = SeededGenerator(seed: UInt64(ProcessInfo.processInfo.environment["OPSH_GUARD_SEED"] ?? "") ?? 20261126)
        let count = Int(ProcessInfo.processInfo.environment["OPSH_GUARD_CASES"] ?? "") ?? 120
        let controls = Self.controlPieces + (engine == .postgresql ? Self.postgresControlPieces : Self.sqliteControlPieces)
        var strings: [(sql: String, control: Bool)] = []
        for _ in 0..<count { strings.append(Self.generate(&generator, controls: controls)) }
        let results = try Self.attempts(strings.map(\.sql), on: db, in: folder, timeout: 300)
        var refused = 0
        for (string, result) in zip(strings, results) {
            #expect(result.rows == 1, "\(engine) \(string.sql.debugDescription) committed the delete: \(result.outcome)")
            if string.control {
                refused += 1
                #expect(result.outcome.contains(Self.refusal), "\(engine) \(string.sql.debugDescription): \(result.outcome)")
            } else {
                #expect(result.outcome == "ran", "\(engine) \(string.sql.debugDescription) was refused: \(result.outcome)")
            }
        }
        #expect(refused > count / 4 && refused < count, "\(refused) of \(count) strings were control")
    }

    static let controlPieces = [
        ["BEGIN"], ["BEGIN", "TRANSACTION"], ["COMMIT"], ["COMMIT", "TRANSACTION"], ["END"], ["END", "TRANSACTION"],
        ["ROLLBACK"], ["ROLLBACK", "TRANSACTION"], ["ROLLBACK", "TO", "sp"], ["ROLLBACK", "TRANSACTION", "TO", "SAVEPOINT", "sp"],
        ["SAVEPOINT", "sp"], ["RELEASE", "sp"], ["RELEASE", "SAVEPOINT", "sp"],
    ]
    static let postgresControlPieces = [
        ["COMMIT", "AND", "CHAIN"], ["COMMIT", "WORK", "AND", "NO", "CHAIN"], ["ABORT"], ["START", "TRANSACTION"],
        ["ROLLBACK", "AND", "CHAIN"], ["PREPARE", "TRANSACTION", "'g'"], ["RELEASE", "opsh_statement"],
        ["ROLLBACK", "TO", "opsh_statement"], ["RELEASE", "SAVEPOINT", "opsh_2"],
    ]
    static let sqliteControlPieces = [["BEGIN", "IMMEDIATE"], ["BEGIN", "DEFERRED", "TRANSACTION"]]
    static let harmlessPieces = [
        ["SELECT", "1"], ["UPDATE", "telemetry", "SET", "event", "=", "event"], ["SELECT", "'COMMIT'"], ["SELECT", "1", "AS", "\"end\""],
    ]
    static let gaps = [" ", "  ", "\n", "\t", " /* COMMIT */ ", "/**/", " -- END\n", "\r\n"]

    /// One to three statements, each control or harmless, in mixed case
    /// with comments and white space between the words.
    static func generate(_ generator: inout SeededGenerator, controls: [[String]]) -> (sql: String, control: Bool) {
        var statements: [String] = []
        var control = false
        for _ in 0..<Int.random(in: 1...3, using: &generator) {
            let isControl = Bool.random(using: &generator)
            control = control || isControl
            let pieces = isControl ? controls.randomElement(using: &generator)! : harmlessPieces.randomElement(using: &generator)!
            var text = Bool.random(using: &generator) ? gaps.randomElement(using: &generator)! : ""
            for (index, piece) in pieces.enumerated() {
                if index > 0 { text += gaps.randomElement(using: &generator)! }
                // Quoted text and the savepoints' names keep their case.
                if piece.hasPrefix("'") || piece.hasPrefix("\"") || piece.hasPrefix("opsh_") { text += piece; continue }
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: text += piece.lowercased()
                case 1: text += piece
                default: text += String(piece.enumerated().map { $0.offset % 2 == 0 ? Character($0.element.uppercased()) : Character($0.element.lowercased()) })
                }
            }
            statements.append(text)
        }
        let separator = [";", "; ", ";\n", " ;-- x\n"].randomElement(using: &generator)!
        return (statements.joined(separator: separator) + (Bool.random(using: &generator) ? ";" : ""), control)
    }

    /// Outside any transaction: `BEGIN` is refused (else what followed ran
    /// in the script's own transaction, and a failed run committed it),
    /// and `COMMIT` is refused as transaction control, not blamed on
    /// db.transaction.
    @Test(arguments: Engine.allCases)
    func outsideATransactionControlIsRefused(_ engine: Engine) throws {
        let folder = try Sandbox()
        let db = try folder.createdDatabase(engine)
        try db.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)")
        let begun = try folder.opsh(["-e", "db.exec('BEGIN'); db.exec('DELETE FROM telemetry'); error('fails')"], on: db)
        #expect(begun.status == 1)
        #expect(begun.stderr.contains(Self.refusal), "\(engine): \(begun.stderr)")
        #expect(try db.count("telemetry") == 1)
        // Caught, BEGIN leaves no transaction open: the next statement is
        // its own, as every statement outside db.transaction is.
        let caught = try folder.opsh(["-e", "print(pcall(db.exec, 'BEGIN')); print(db.inTransaction())"], on: db)
        #expect(caught.stdout.contains("false\t") && caught.stdout.contains(Self.refusal), "\(engine): \(caught.stdout)")
        #expect(caught.stdout.hasSuffix("false\n"), "\(engine): \(caught.stdout)")
        for sql in ["COMMIT", "end", "ROLLBACK"] {
            let run = try folder.opsh(["-e", "db.exec('\(sql)')"], on: db)
            #expect(run.status == 1)
            #expect(run.stderr.contains(Self.refusal), "\(engine) \(sql): \(run.stderr)")
            #expect(!run.stderr.contains("db.transaction opened"), "\(engine) \(sql): \(run.stderr)")
        }
        // Control: the same delete without BEGIN's failure after it lands.
        let control = try folder.opsh(["-e", "db.exec('DELETE FROM telemetry')"], on: db)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try db.count("telemetry") == 0)
    }

    /// A statement that waits for a lock longer than `--busy-timeout`
    /// gives up: exit 3, "database is locked", naming the holder (on
    /// SQLite the process holding the file's lock, on PostgreSQL the
    /// session the server says blocks it, by `pg_blocking_pids`).
    @Test(arguments: Engine.allCases)
    func aLockHeldPastTheBusyTimeoutExitsThreeNamingItsHolder(_ engine: Engine) throws {
        let folder = try Sandbox()
        let db = try folder.createdDatabase(engine)
        try db.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)")
        let holder: ChildProcess
        let holderName: String
        switch engine {
        case .sqlite:
            // The holder waits for the lock (.timeout): the probe below takes
            // it for a moment, and a holder refused then would never hold it.
            holder = try folder.start("/usr/bin/sqlite3", [db.db], stdin: ".timeout 10000\nBEGIN IMMEDIATE;\nINSERT INTO telemetry (event, created_at) VALUES ('x', 0);\n",
                                      keepingStdinOpen: true)
            holderName = "sqlite3 (pid \(holder.pid)"
            #expect(try waitUntil(10) {
                try folder.run("/usr/bin/sqlite3", ["-cmd", ".timeout 0", db.db, "BEGIN IMMEDIATE; ROLLBACK;"]).stderr.contains("locked")
            })
        case .postgresql:
            let server = try PostgresServer.shared()
            holder = try folder.start(server.tool("psql"), ["-X", "-q", "-d", db.db], stdin: "BEGIN;\nLOCK TABLE telemetry;\n",
                                      keepingStdinOpen: true)
            #expect(try waitUntil(10) {
                try db.sql("SELECT count(*) FROM pg_locks WHERE relation = 'telemetry'::regclass AND mode = 'AccessExclusiveLock' AND granted") == "1"
            })
            let pid = try db.sql("SELECT pid FROM pg_locks WHERE relation = 'telemetry'::regclass AND mode = 'AccessExclusiveLock'")
            holderName = "session \(pid) (psql"
        }
        let started = Date()
        // --timeout: a run that ignored the busy timeout would wait for ever.
        let blocked = try folder.opsh(["--busy-timeout", "1", "--timeout", "30", "-e", "db.exec(\"UPDATE telemetry SET event = 'changed'\")"], on: db)
        let waited = Date().timeIntervalSince(started)
        holder.write("ROLLBACK;\n")
        holder.closeInput()
        _ = holder.finish()
        #expect(blocked.status == 3, "\(engine): \(blocked.stderr)")
        #expect(blocked.stderr.contains("database is locked"), "\(engine): \(blocked.stderr)")
        #expect(blocked.stderr.contains(holderName), "\(engine): \(holderName) in \(blocked.stderr)")
        #expect(waited < 20, "\(engine): waited \(waited) s")
        #expect(try db.count("telemetry", where: "event = 'changed'") == 0)
        // Control: once the holder is gone, the same run goes through.
        let free = try folder.opsh(["--busy-timeout", "1", "-e", "db.exec(\"UPDATE telemetry SET event = 'changed'\")"], on: db)
        #expect(free.status == 0, "\(engine): \(free.stderr)")
        #expect(try db.count("telemetry", where: "event = 'changed'") == 1)
    }

    /// opsh's savepoints by name, from a nested db.transaction (PostgreSQL
    /// names them opsh_N and opsh_statement): releasing or rolling back to
    /// them never commits what the outer transaction did, which then fails:
    /// the row stays on both engines. When the outer transaction does not
    /// fail, SQLite, which refused the statement before it ran, commits at
    /// the transaction's end as usual; PostgreSQL's guard has ended opsh's
    /// transaction, which keeps nothing. Control: the same nested
    /// transactions without the statement commit the delete.
    @Test(arguments: Engine.allCases) func opshsSavepointsByNameCommitNothing(_ engine: Engine) throws {
        let folder = try Sandbox()
        let db = try folder.createdDatabase(engine)
        let spellings = ["RELEASE SAVEPOINT opsh_2", "ROLLBACK TO SAVEPOINT opsh_2", "release opsh_statement"]
        for keep in [false, true] {
            let results = try Self.attempts(spellings, on: db, in: folder, keep: keep, nested: true, timeout: 60)
            let left = !keep || engine == .postgresql ? 1 : 0
            for (sql, result) in zip(spellings, results) {
                #expect(result.rows == left, "\(engine) \(sql.debugDescription) (keep: \(keep)): \(result.outcome)")
                #expect(result.outcome.contains(Self.refusal), "\(engine) \(sql.debugDescription): \(result.outcome)")
            }
        }
        let control = try Self.attempts(["SELECT 1"], on: db, in: folder, keep: true, nested: true)
        #expect(control.first?.outcome == "ran")
        #expect(control.first?.rows == 0)
    }

    /// A chunk at the shell's prompt is opsh's transaction: SQL that would
    /// end it early, however spelled, is refused with the reason and the
    /// whole chunk is rolled back. A COMMIT caught by pcall: SQLite
    /// refused it before it ran, so the chunk goes on and commits at its
    /// end as chunks do; PostgreSQL's guard has ended opsh's transaction,
    /// so the chunk keeps nothing. The control writes the same rows without it.
    @Test(arguments: Engine.allCases) func aChunkCannotBeEndedBySQL(_ engine: Engine) throws {
        let folder = try Sandbox()
        let db = try folder.createdDatabase(engine)
        try db.sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'n1'), (2, 'n2')")
        let bodies = { try db.sql("SELECT body FROM notes ORDER BY id") }
        let terminal = try PseudoTerminal(arguments: ["--db", db.db], environment: folder.environment)
        terminal.expect("> ")
        let attacks = [
            "db.exec(\"UPDATE notes SET body = 'a' WHERE id = 1\"); db.exec('/* done */ cOmMiT')",
            "db.exec(\"UPDATE notes SET body = 'a' WHERE id = 1\"); db.exec('end transaction')",
            "db.exec(\"UPDATE notes SET body = 'a' WHERE id = 1; COMMIT; UPDATE notes SET body = 'b' WHERE id = 2\")",
            "db.exec(\"UPDATE notes SET body = 'a' WHERE id = 1\"); db.exec('RELEASE x; -- savepoint')",
        ]
        for attack in attacks {
            terminal.send(attack + "\r")
            terminal.expect(Self.refusal)
            terminal.expect("> ")
            #expect(try bodies() == "n1\nn2", "\(engine): \(attack) kept a write")
        }
        terminal.send("db.exec(\"UPDATE notes SET body = 'c' WHERE id = 1\"); print(select(2, pcall(db.exec, 'COMMIT'))); print('af' .. 'ter')\r")
        terminal.expect("is not run through db")
        terminal.expect("after")
        terminal.expect("> ")
        #expect(try bodies() == (engine == .sqlite ? "c\nn2" : "n1\nn2"), "\(engine)")
        // Control: the same writes without transaction control commit.
        terminal.send("db.exec(\"UPDATE notes SET body = 'a' WHERE id = 1; UPDATE notes SET body = 'b' WHERE id = 2\")\r")
        terminal.expect("committed: notes: 2 updated")
        terminal.expect("> ")
        #expect(try bodies() == "a\nb")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }
}
