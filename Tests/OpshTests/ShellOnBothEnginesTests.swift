import Foundation
import Testing

/// The shell's features on either engine, through a real pty (issue "One
/// session under both engines"): the catalog's dot commands, who holds a
/// lock, `.help` listing what works here, and the question before a chunk
/// that changed many rows commits. One body, both engines.
@Suite struct ShellOnBothEnginesTests {
    func shell(_ sandbox: Sandbox, _ database: TestDatabase, _ extra: [String] = []) throws -> PseudoTerminal {
        let terminal = try PseudoTerminal(arguments: ["--db", database.db] + extra, environment: sandbox.environment)
        terminal.expect("> ")
        return terminal
    }

    @Test(arguments: Engine.allCases) func tablesAndSchemaComeFromTheCatalog(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try shell(sandbox, database)
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
        let terminal = try shell(sandbox, database)
        terminal.send(".locks\r")
        terminal.expect("no other session holds a lock")
        terminal.expect("> ")
        let holder: ChildProcess
        switch engine {
        case .sqlite:
            holder = try sandbox.start("/usr/bin/sqlite3", [database.db], stdin: "BEGIN IMMEDIATE;\nINSERT INTO telemetry (event, created_at) VALUES ('x', 0);\n",
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

    /// `.help` lists what works on this engine: undo() only where a chunk
    /// can be taken back; undo() elsewhere says why not.
    @Test(arguments: Engine.allCases) func helpListsOnlyWhatWorksHere(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try shell(sandbox, database)
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

    /// A mass DELETE at the prompt asks before committing, on both engines,
    /// with the transaction open; no rolls it back, yes commits.
    @Test(arguments: Engine.allCases) func aLargeDeleteAsksBeforeCommitting(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let rows = engine == .sqlite
            ? "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3321) INSERT INTO telemetry (event, created_at) SELECT 'bulk', i FROM n"
            : "INSERT INTO telemetry (event, created_at) SELECT 'bulk', i FROM generate_series(1, 3321) i"
        try database.sql(rows)
        let terminal = try shell(sandbox, database)
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
}
