import Foundation
import Testing

/// The shell's features on either engine, through a real pty (issue "One
/// session under both engines"): the catalog's dot commands, who holds a
/// lock, `.help` listing what works here, and the question before a chunk
/// that changed many rows commits. One body, both engines.
@Suite struct ShellOnBothEnginesTests {
    @Test(arguments: Engine.allCases) func tablesAndSchemaComeFromTheCatalog(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send(".tables\r")
        terminal.expect("buildLogs")
        terminal.expect("telemetry")
        terminal.expect("> ")
        terminal.send(".schema builds\r")
        // SQLite's CREATE statement, PostgreSQL's \d; either names its columns.
        terminal.expect(engine == .sqlite ? "CREATE TABLE builds" : "Table \"public.builds\"")
        terminal.expect(engine == .sqlite ? "versionString" : "versionstring")
        terminal.expect("> ")
        terminal.send(".schema nosuchtable\r")
        terminal.expect("no table or view named nosuchtable")
        terminal.expect("> ")
        // Completion of a table's name in SQL, from the same catalog.
        terminal.send("db.query('SELECT * FROM teleme\t")
        terminal.expect("telemetry")
        terminal.send("\u{3}")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    /// `.locks` names the other process that holds a lock, as the lock's
    /// own engine sees it (SQLite: /proc/locks; PostgreSQL: pg_locks and
    /// pg_stat_activity, with the application's name and query).
    @Test(arguments: Engine.allCases) func locksNamesTheOtherHolder(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send(".locks\r")
        terminal.expect("no other session holds a lock")
        terminal.expect("> ")
        let holder: ChildProcess
        switch engine {
        case .sqlite:
            holder = try sandbox.start("/usr/bin/sqlite3", [database.db], stdin: ".timeout 10000\nBEGIN IMMEDIATE;\nINSERT INTO telemetry (event, created_at) VALUES ('x', 0);\n",
                                       keepingStdinOpen: true)
        case .postgresql:
            holder = try sandbox.start(try PostgresServer.shared().tool("psql"), ["-X", "-q", "-d", database.db],
                                       stdin: "BEGIN;\nLOCK TABLE telemetry IN ACCESS EXCLUSIVE MODE;\n", keepingStdinOpen: true,
                                       environment: sandbox.environment.merging(["PGAPPNAME": "lock-holder"]) { $1 })
        }
        defer {
            holder.closeInput()
            _ = holder.finish()
        }
        // PostgreSQL names the server's backend (its pid is not psql's).
        let expected = engine == .sqlite ? "sqlite3 (pid \(holder.pid), writing)" : "(lock-holder, user"
        let named = waitUntil(10) {
            terminal.send(".locks\r")
            return terminal.sees(expected, timeout: 0.5)
        }
        #expect(named, "\(terminal.transcript)")
        if engine == .postgresql { terminal.expect("holding AccessExclusiveLock on telemetry") }
    }

    /// A write that waits for a lock says so after a second at the prompt,
    /// naming who holds it, and goes on once the lock is released; the
    /// same write without the holder (the control) says nothing of a wait.
    @Test(arguments: Engine.allCases) func aWriteWaitingForALockSaysWhoHoldsIt(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--busy-timeout", "30"], environment: sandbox.environment)
        terminal.expect("> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('free', 1)\")\r")
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("waiting"), "\(terminal.transcript)")
        let holder: ChildProcess
        switch engine {
        case .sqlite:
            holder = try sandbox.start("/usr/bin/sqlite3", [database.db], stdin: ".timeout 10000\nBEGIN IMMEDIATE;\nINSERT INTO telemetry (event, created_at) VALUES ('x', 0);\n",
                                       keepingStdinOpen: true)
        case .postgresql:
            holder = try sandbox.start(try PostgresServer.shared().tool("psql"), ["-X", "-q", "-d", database.db],
                                       stdin: "BEGIN;\nLOCK TABLE telemetry IN ACCESS EXCLUSIVE MODE;\n", keepingStdinOpen: true,
                                       environment: sandbox.environment.merging(["PGAPPNAME": "lock-holder"]) { $1 })
        }
        // The holder has the lock once another writer cannot write.
        #expect(waitUntil(10) { (try? sandbox.run(engine == .sqlite ? "/usr/bin/sqlite3" : PostgresServer.shared().tool("psql"),
            engine == .sqlite ? [database.db, ".timeout 0", "INSERT INTO telemetry (event, created_at) VALUES ('probe', 2)"]
                : ["-X", "-q", "-d", database.db, "-c", "SET lock_timeout = '50ms'", "-c", "INSERT INTO telemetry (event, created_at) VALUES ('probe', 2)"]).status) != 0 })
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('waits', 3)\")\r")
        terminal.expect("waiting ")
        terminal.expect(engine == .sqlite ? "for a lock held by sqlite3 (pid \(holder.pid), writing)" : "for a lock held by session ")
        if engine == .postgresql { terminal.expect("(lock-holder, user") }
        terminal.expect("gives up after 30 s (--busy-timeout); Ctrl-C stops waiting")
        holder.closeInput()
        _ = holder.finish()
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("> ")
        #expect(try database.count("telemetry", where: "event = 'waits'") == 1)
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// A statement that runs for seconds without waiting for any lock (no
    /// other session holds one) says nothing of a lock: on PostgreSQL the
    /// notice came from the statement's time alone and named "another
    /// session" that did not exist. The control, a write that does wait,
    /// is the test above.
    @Test(arguments: Engine.allCases) func aLongStatementThatWaitsForNoLockSaysNothingOfALock(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--busy-timeout", "30"], environment: sandbox.environment)
        terminal.expect("> ")
        // About three seconds of work, past the notice's one second; the
        // answer is not in the typed line's echo.
        let slow = engine == .sqlite
            ? "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 40000000) SELECT count(*) + 1 FROM c"
            : "SELECT count(*) + 6000 * 7 FROM pg_catalog.pg_sleep(3)"
        terminal.send("print(db.value(\"\(slow)\"))\r")
        terminal.expect(engine == .sqlite ? "40000001" : "42001", timeout: 60)
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("for a lock"), "\(terminal.transcript)")
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// `.help` lists what works on this engine: undo() only where a chunk
    /// can be taken back; undo() elsewhere says why not.
    @Test(arguments: Engine.allCases) func helpListsOnlyWhatWorksHere(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send(".help\r")
        terminal.expect(".confirm N|off")
        terminal.expect("Ctrl-C clears the line")
        terminal.expect("> ")
        let help = terminal.transcript
        #expect(help.contains("undo() takes back") == (engine == .sqlite), "\(help)")
        terminal.send("undo()\r")
        terminal.expect(engine == .sqlite ? "nothing to undo" : "undo() is not available on PostgreSQL")
        terminal.expect("> ")
    }

    /// Every dot command `.help` lists works at either engine's prompt
    /// (the catalog's and `.locks` have tests of their own above).
    @Test(arguments: Engine.allCases) func everyListedDotCommandWorks(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let script = sandbox.root + "/chunk.lua"
        try "print('read' .. ' ran')".write(toFile: script, atomically: true, encoding: .utf8)
        let results = sandbox.root + "/results.csv"
        let terminal = try sandbox.shell(database)
        terminal.send(".timer on\r")
        terminal.expect("> ")
        terminal.send("return 1\r")
        terminal.expect("Run Time: ")
        terminal.expect("> ")
        terminal.send(".timer off\r")
        terminal.expect("> ")
        terminal.send(".mode csv\r")
        terminal.expect("> ")
        terminal.send(".mode\r")
        terminal.expect("csv")
        terminal.send("return db.query('SELECT 7 AS seven UNION ALL SELECT 8 ORDER BY 1')\r")
        terminal.expect("seven\n7\n8")
        terminal.send(".rows 1\r")
        terminal.expect("> ")
        terminal.send(".rows\r")
        terminal.expect("\n1\n")
        terminal.send(".output \(results)\r")
        terminal.expect("> ")
        terminal.send("return db.query('SELECT 7 AS seven UNION ALL SELECT 8 ORDER BY 1')\r")
        terminal.expect("> ")
        terminal.send(".output\r")
        terminal.expect("> ")
        #expect(waitUntil(10) { (try? String(contentsOfFile: results, encoding: .utf8)) == "seven\n7\n8\n" },
                "\((try? String(contentsOfFile: results, encoding: .utf8)) ?? "no file")")
        terminal.send(".read \(script)\r")
        terminal.expect("read ran")
        terminal.send(".confirm 5\r")
        terminal.expect("> ")
        terminal.send(".confirm\r")
        terminal.expect("asks before committing more than 5 changed rows")
        terminal.expect("> ")
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// `.once FILE` sends the next chunk's returned values to a new file,
    /// and the one after to the terminal again; an existing file is not
    /// overwritten (the reason is said).
    @Test(arguments: Engine.allCases) func dotOnceSendsOnlyTheNextChunkToAFile(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let file = sandbox.root + "/once.csv"
        let terminal = try sandbox.shell(database)
        terminal.send(".mode csv\r")
        terminal.expect("> ")
        terminal.send(".once \(file)\r")
        terminal.expect("the next chunk's returned values go to \(file)")
        terminal.expect("> ")
        terminal.send("return db.query('SELECT 9417263 AS answer')\r")
        terminal.expect("> ")
        terminal.send("return db.query('SELECT 8251973 AS after')\r")
        terminal.expect("after\n8251973")
        terminal.expect("> ")
        #expect(waitUntil(10) { (try? String(contentsOfFile: file, encoding: .utf8)) == "answer\n9417263\n" },
                "\((try? String(contentsOfFile: file, encoding: .utf8)) ?? "no file")")
        // 9417263 appears once on the terminal: in the typed line, not as a result.
        #expect(terminal.transcript.components(separatedBy: "9417263").count == 2, "\(terminal.transcript)")
        terminal.send(".once \(sandbox.root + "/data")\r")
        terminal.expect("cannot write")
        terminal.expect("> ")
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// `.output FILE` appears whole: while results are written the name
    /// holds nothing a reader could take for the file; at `.output` it
    /// appears with everything. An earlier output of the session, as opsh
    /// left it, may be written again (the control); a file someone else
    /// put at the name meanwhile is not overwritten, and the results are
    /// kept where they were written, which the error names.
    @Test(arguments: Engine.allCases) func outputFilesAppearWhole(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let file = sandbox.root + "/results.csv"
        let terminal = try sandbox.shell(database)
        terminal.send(".mode csv\r")
        terminal.expect("> ")
        terminal.send(".output \(file)\r")
        terminal.expect("returned values go to \(file)")
        terminal.send("return db.query('SELECT 6172 AS first')\r")
        terminal.expect("> ")
        #expect(!FileManager.default.fileExists(atPath: file), "a reader saw the file before it was whole")
        terminal.send("return db.query('SELECT 6173 AS second')\r")
        terminal.expect("> ")
        terminal.send(".output\r")
        terminal.expect("> ")
        #expect(waitUntil(10) { (try? String(contentsOfFile: file, encoding: .utf8)) == "first\n6172\nsecond\n6173\n" },
                "\((try? String(contentsOfFile: file, encoding: .utf8)) ?? "no file")")
        // The control: the session's own file, unchanged, is written again.
        terminal.send(".output \(file)\r")
        terminal.expect("returned values go to \(file)")
        terminal.send("return db.query('SELECT 6174 AS third')\r")
        terminal.expect("> ")
        terminal.send(".output\r")
        terminal.expect("> ")
        #expect(waitUntil(10) { (try? String(contentsOfFile: file, encoding: .utf8)) == "third\n6174\n" },
                "\((try? String(contentsOfFile: file, encoding: .utf8)) ?? "no file")")
        // Someone else's file appears at the name while opsh writes.
        let other = sandbox.root + "/other.csv"
        terminal.send(".output \(other)\r")
        terminal.expect("returned values go to \(other)")
        terminal.send("return db.query('SELECT 6175 AS fourth')\r")
        terminal.expect("> ")
        try "the operator's own\n".write(toFile: other, atomically: false, encoding: .utf8)
        terminal.send(".output\r")
        terminal.expect("opsh does not overwrite a file it did not make")
        terminal.expect("what was written is kept in ")
        terminal.expect("> ")
        #expect((try? String(contentsOfFile: other, encoding: .utf8)) == "the operator's own\n")
        let kept = try FileManager.default.contentsOfDirectory(atPath: sandbox.root).filter { $0.hasPrefix(".other.csv.opsh-") }
        #expect(kept.count == 1, "\(kept)")
        #expect(kept.first.flatMap { try? String(contentsOfFile: sandbox.root + "/" + $0, encoding: .utf8) } == "fourth\n6175\n")
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// `.undo` lists what undo() can take back, newest first, with the n
    /// for each; an undone chunk says by which. On PostgreSQL it says why
    /// there is no undo.
    @Test(arguments: Engine.allCases) func dotUndoListsWhatCanBeTakenBack(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('first', 1)\")\r")
        terminal.expect("> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('second', 2), ('third', 3)\")\r")
        terminal.expect("> ")
        terminal.send(".undo\r")
        guard engine == .sqlite else {
            terminal.expect("undo() is not available on PostgreSQL")
            terminal.expect("> ")
            terminal.send("undo.list()\r")
            terminal.expect("undo() is not available on PostgreSQL")
            terminal.expect("> ")
            terminal.send(".q\r")
            #expect(terminal.waitForExit() == 0)
            return
        }
        terminal.expect("undo(1)  chunk 2: db.exec(\"INSERT INTO telemetry (event, created_… — telemetry: 2 inserted")
        terminal.expect("undo(2)  chunk 1: ")
        terminal.expect("> ")
        // undo.list() gives the same list; undo() is still called as ever.
        terminal.send("print(undo.list())\r")
        terminal.expect("undo(1)  chunk 2: db.exec(\"INSERT INTO telemetry (event, created_… — telemetry: 2 inserted")
        terminal.expect("> ")
        terminal.send("undo()\r")
        terminal.expect("committed")
        terminal.expect("> ")
        terminal.send(".undo\r")
        terminal.expect("undo(1)  chunk 3: undo() — telemetry: 2 deleted")
        terminal.expect("undone by chunk 3  chunk 2:")
        terminal.expect("undo(3)  chunk 1:")
        terminal.expect("> ")
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// `.timer` counts the chunk's own time, not the time the operator
    /// took at the confirmation question: the chunk sits at the question
    /// for 1.5 s and its Run Time stays under a second.
    @Test(arguments: Engine.allCases) func theTimerLeavesOutTheTimeAtTheQuestion(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send(".timer on\r")
        terminal.expect("> ")
        terminal.send(".confirm 1\r")
        terminal.expect("> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('a', 1), ('b', 2)\")\r")
        terminal.expect("commit? [y/N] ")
        let asked = Date()
        // The operator thinks for a while: time passes at the question.
        _ = waitUntil(10) { Date().timeIntervalSince(asked) >= 1.5 }
        terminal.send("y\r")
        terminal.expect("Run Time: ")
        terminal.expect(" s")
        terminal.expect("> ")
        let shown = terminal.transcript.components(separatedBy: "Run Time: ").last?.split(separator: " ").first.flatMap { Double($0) }
        #expect(shown != nil && shown! < 1.0, "\(terminal.transcript)")
        #expect(try database.count("telemetry") == 2)
        terminal.send(".q\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// A mass DELETE at the prompt asks before committing, on both engines,
    /// with the transaction open; no rolls it back, yes commits.
    @Test(arguments: Engine.allCases) func aLargeDeleteAsksBeforeCommitting(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let rows = engine == .sqlite
            ? "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3321) INSERT INTO telemetry (event, created_at) SELECT 'bulk', i FROM n"
            : "INSERT INTO telemetry (event, created_at) SELECT 'bulk', i FROM generate_series(1, 3321) i"
        try database.sql(rows)
        let terminal = try sandbox.shell(database)
        terminal.send("db.exec(\"DELETE FROM telemetry\")\r")
        terminal.expect("this chunk changes 3321 rows:")
        terminal.expect("telemetry: 0 inserted, 0 updated, 3321 deleted")
        terminal.expect("commit? [y/N] ")
        #expect(try database.count("telemetry") == 3321)
        terminal.send("n\r")
        terminal.expect("rolled back: nothing was changed")
        terminal.expect("> ")
        #expect(try database.count("telemetry") == 3321)
        // Control: yes commits.
        terminal.send("db.exec(\"DELETE FROM telemetry\")\r")
        terminal.expect("commit? [y/N] ")
        terminal.send("y\r")
        terminal.expect("committed: telemetry: 3321 deleted")
        terminal.expect("> ")
        #expect(try database.count("telemetry") == 0)
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    /// A chunk is one transaction: it commits when it ends (and says what
    /// it changed), a failure caught inside does not doom it, and a chunk
    /// that fails keeps nothing.
    @Test(arguments: Engine.allCases) func aChunkIsOneTransaction(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send("db.engine\r")
        terminal.expect(engine.rawValue)
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)\"); pcall(db.exec, 'SELECT * FROM nope'); db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('kept too', 2)\")\r")
        terminal.expect("committed: telemetry: 2 inserted")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('lost', 3)\"); error('changed my mind')\r")
        terminal.expect("stdin:1: changed my mind")
        terminal.send("db.value('SELECT count(*) * 1001 FROM telemetry')\r")
        terminal.expect("2002")
        terminal.send("db.query('SELECT event FROM telemetry ORDER BY id')\r")
        terminal.expect("kept too")
        terminal.expect("(2 rows)")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
        #expect(try database.sql("SELECT event FROM telemetry ORDER BY id") == "kept\nkept too")
    }

    /// Another process's commit reaches a watch while the shell waits at
    /// its prompt, with a line being typed: the callback prints above the
    /// line, which is kept.
    @Test(arguments: Engine.allCases) func aWatchPrintsAtThePrompt(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send("w = watch('SELECT count(*) AS n FROM telemetry', function(rows) print('now ' .. rows[1].n) end)\r")
        terminal.expect("> ")
        terminal.send("x = 41")  // a line being typed while the event arrives
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('x', 1)")
        terminal.expect("now 1")
        terminal.send("\r")
        terminal.expect("> ")
        terminal.send("x + 1\r")
        terminal.expect("42")
        terminal.expect("> ")
        // .quit, not Ctrl-D: about one run in ten on PostgreSQL a Ctrl-D
        // sent right after this prompt is never seen by the shell (readline's
        // line is empty, nothing is pending; not understood yet).
        terminal.send(".quit\r")
        #expect(terminal.waitForExit() == 0, "\(terminal.transcript)")
    }

    /// --dry-run: what the session changes is rolled back at the end (on
    /// SQLite on a private copy, on PostgreSQL in one transaction).
    @Test(arguments: Engine.allCases) func aDryRunSessionKeepsNothing(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--dry-run"], environment: sandbox.environment)
        terminal.expect("a dry run")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('x', 1)\")\r")
        terminal.expect("dry run")
        terminal.expect("telemetry: 1 inserted")
        // The answer (1002) is not in the echo of the line typed.
        terminal.send("db.value('SELECT count(*) * 1001 + 1 FROM telemetry')\r")
        terminal.expect("1002", timeout: 20)
        terminal.expect("> ", timeout: 20)
        terminal.send("\u{4}")
        terminal.expect("telemetry: 1 inserted, 0 updated, 0 deleted", timeout: 20)
        #expect(terminal.waitForExit() == 0)
        #expect(try database.count("telemetry") == 0)
    }

    /// Ctrl-C during a chunk's statement stops it (SQLite's interrupt; on
    /// PostgreSQL a cancel on the server, which is then not left running
    /// it): the prompt comes back, the chunk's writes are rolled back.
    @Test(arguments: Engine.allCases) func ctrlCStopsTheChunksStatement(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        let endless = engine == .sqlite
            ? "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
            : "SELECT pg_sleep(30)"
        let running = "SELECT count(*) FROM pg_stat_activity WHERE datname = '\(PostgresServer.databaseName(of: database.db))' "
            + "AND query LIKE '%pg_sleep(30)%' AND state = 'active' AND pid <> pg_backend_pid()"
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('lost', 1)\"); print('run' .. 'ning'); db.exec('\(endless)')\r")
        // Once the statement runs: the server says so; SQLite's starts right after the line printed.
        terminal.expect("running")
        if engine == .postgresql {
            #expect(try waitUntil(10) { try database.sql(running) == "1" })
        }
        let started = Date()
        terminal.send("\u{3}")
        terminal.expect("interrupted; the chunk was rolled back", timeout: 10)
        #expect(Date().timeIntervalSince(started) < 10)
        // (The answer is spelled apart from the echo of the line typed.)
        terminal.send("print('rows' .. ' left: ' .. db.value('SELECT count(*) FROM telemetry'))\r")
        terminal.expect("rows left: 0", timeout: 10)
        if engine == .postgresql {
            #expect(try database.sql(running) == "0")
        }
        #expect(try database.count("telemetry") == 0)
        terminal.expect("> ", timeout: 10)
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    /// undo() after a committed chunk: SQLite takes it back (the inverse of
    /// the changeset its session extension recorded); PostgreSQL has no
    /// changesets, so it says why and what to use instead, and the row stays.
    @Test(arguments: Engine.allCases) func undoAfterACommittedChunk(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database, ["--no-init"])
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('x', 1)\")\r")
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("> ")
        terminal.send("undo()\r")
        switch engine {
        case .sqlite:
            terminal.expect("undoes chunk 1")
        case .postgresql:
            terminal.expect("undo() is not available on PostgreSQL: it takes a chunk back by applying the inverse of the changeset SQLite's session extension recorded for it")
            terminal.expect("start the shell with --dry-run")
        }
        terminal.expect("> ")
        terminal.send("\u{4}")
        // A busy machine (issue 24): the shell's exit, its checkpoint
        // included, is waited for by polling, not within a fixed 5 s.
        #expect(terminal.waitForExit(timeout: 60) == 0)
        #expect(try database.count("telemetry") == (engine == .sqlite ? 0 : 1))
    }

    /// vacuum() in the shell, where a chunk is one transaction: it runs (on
    /// a connection of its own) in a chunk that has not written, and is
    /// refused with the reason in one that has.
    @Test(arguments: Engine.allCases) func vacuumRunsInAChunkThatHasNotWritten(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('x', 1)\"); vacuum()\r")
        // (Each engine words it its own way.)
        terminal.expect(engine == .sqlite ? "vacuum cannot run inside a chunk that has written (a chunk at the prompt is one transaction until it ends"
                        : "vacuum cannot run in a shell chunk that has written: on PostgreSQL each chunk is one transaction")
        terminal.expect("> ")
        terminal.send("vacuum().pagesBefore > 0\r")
        terminal.expect("true")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
        #expect(try database.count("telemetry") == 0)
        if engine == .postgresql {
            #expect(try database.sql("SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'telemetry'") == "t")
        }
    }

    /// Ctrl-C in a `db.rows` loop (issue 27's row path, stepped without the
    /// reader's lock) leaves no statement open: the loop's to-be-closed
    /// cursor is closed although the interrupt unwinds it, so the next
    /// statement at the prompt runs (SQLite keeps an interrupt pending while
    /// a statement of the connection is open: "interrupted" again) and, on
    /// SQLite, another process's checkpoint finishes while the shell sits
    /// idle. The control: the same loop left by an error. Before the fix
    /// the interrupt hook stopped the cursor's `__close` before it ran.
    @Test(arguments: Engine.allCases) func ctrlCInARowsLoopLeavesNoStatementOpen(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('a', 1), ('a', 2), ('a', 3)")
        let terminal = try sandbox.shell(database)
        for ending in ["error", "ctrl-c"] {
            // The loop stops in its second row, its statement open.
            let leave = ending == "error" ? "error('stop')" : "while true do end"
            terminal.send("for row in db.rows('SELECT created_at AS x FROM telemetry ORDER BY created_at') do"
                          + " if row.x == 2 then print('loop' .. 'ing') \(leave) end end\r")
            terminal.expect("looping")
            if ending == "ctrl-c" {
                terminal.send("\u{3}")
                terminal.expect("interrupted")
            } else {
                terminal.expect("stop")
            }
            terminal.expect("> ")
            if engine == .sqlite {
                try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('b', 4); DELETE FROM telemetry WHERE event = 'b'")
                var checkpoint = ""
                #expect(try waitUntil(5) {
                    checkpoint = try database.sql("PRAGMA wal_checkpoint(TRUNCATE)")
                    return checkpoint.hasPrefix("0|")
                }, "\(ending): the checkpoint was blocked by the shell's open statement (\(checkpoint))")
            }
            terminal.send("print('count ' .. db.value('SELECT count(*) FROM telemetry'))\r")
            #expect(terminal.expect("count 3"), "\(ending): the next statement did not run")
            terminal.expect("> ")
        }
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 60) == 0)
    }
}
