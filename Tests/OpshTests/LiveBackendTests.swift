import Foundation
import Testing

/// Beside a live backend (issue 17, section 1): opening and reading never
/// wait for another process's write lock, and an existing database is
/// never migrated implicitly. The backend here is a real `sqlite3` process
/// holding a write transaction.
@Suite struct LiveBackendTests {
    /// Drops migration 002 (its record and its indexes), as a database
    /// made by an older opsh would lack it.
    static func withoutMigration002(_ sandbox: Sandbox) throws {
        let indexes = try sandbox.sqlite("SELECT group_concat(name, ' ') FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
        let drops = indexes.split(separator: " ").map { "DROP INDEX \($0);" }.joined()
        try sandbox.sqlite("DELETE FROM grdb_migrations WHERE identifier = '002_indexes'; \(drops)")
    }

    @Test func readsAndTheShellStartWhileAnotherProcessHoldsTheWriteLock() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            for code in ["return db.value('SELECT count(*) FROM projects')", "return projects.count()", "return #builds.list()"] {
                let started = Date()
                let read = try sandbox.opsh(["--busy-timeout", "5", "-e", code])
                let seconds = Date().timeIntervalSince(started)
                #expect(read.status == 0, "\(code): \(read.stderr)")
                #expect(read.stdout == "0\n")
                #expect(seconds < 2.5, "\(code) took \(seconds) s behind the backend's write lock")
            }
            // The shell starts and answers.
            let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database], environment: sandbox.environment)
            terminal.expect("opsh> ", timeout: 3)
            terminal.send("projects.count()\r")
            terminal.expect("0")
            terminal.expect("opsh> ")
            terminal.send("\u{4}")
            #expect(terminal.waitForExit(timeout: 15) == 0)
            // A write waits for the busy timeout like any writer, then says why.
            let write = try sandbox.opsh(["--busy-timeout", "1", "-e", "projects.insert{ bundleIdentifier = 'x', name = 'X', gitRepositoryURL = '/x' }"])
            #expect(write.status == 3)
            #expect(write.stderr.contains("database is locked"), "\(write.stderr)")
        }
        // Control: with the lock released the same write lands.
        let write = try sandbox.opsh(["-e", "projects.insert{ bundleIdentifier = 'x', name = 'X', gitRepositoryURL = '/x' }"])
        #expect(write.status == 0, "\(write.stderr)")
    }

    @Test func anExistingDatabaseIsNotMigratedImplicitly() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try Self.withoutMigration002(sandbox)
        let indexes = "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        // Opening, reading and writing leave it as it is, and say so.
        let run = try sandbox.opsh(["-e", "projects.insert{ bundleIdentifier = 'x', name = 'X', gitRepositoryURL = '/x' } return projects.count()"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("this database lacks migrations 002_indexes"), "\(run.stderr)")
        #expect(run.stderr.contains("opsh migrate"))
        #expect(try sandbox.sqlite(indexes) == "0")
        let status = try sandbox.opsh(["--json", "-e", "for _, m in ipairs(migrate.status()) do if m.id == '002_indexes' then return m.state end end"])
        #expect(status.stdout == "\"pending\"\n", "\(status.stdout) \(status.stderr)")
        // The shell's banner says it too.
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database], environment: sandbox.environment)
        terminal.expect("this database lacks migrations 002_indexes")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(try sandbox.sqlite(indexes) == "0")
        // opsh migrate applies it; afterwards nothing is pending.
        let migrated = try sandbox.opsh(["migrate"])
        #expect(migrated.status == 0, "\(migrated.stderr)")
        #expect(migrated.stderr.contains("applied 002_indexes"), "\(migrated.stderr)")
        #expect(try sandbox.sqlite(indexes) != "0")
        let again = try sandbox.opsh(["-e", "return 1"])
        #expect(!again.stderr.contains("lacks migrations"), "\(again.stderr)")
        // A database opsh creates is migrated at creation.
        let fresh = sandbox.root + "/fresh.sqlite"
        #expect(try sandbox.run(opshExecutable, ["--db", fresh, "--create", "-e", "return 1"]).status == 0)
        #expect(try sqlite3CLI(fresh, "SELECT count(*) FROM grdb_migrations") == "8")
    }

    /// A dry run takes the write lock only from its first write (issue 17,
    /// section 3): one that reads runs at once behind the backend's write,
    /// and the backend writes while it reads.
    @Test func aDryRunThatOnlyReadsNeverTakesTheWriteLock() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            let started = Date()
            let read = try sandbox.opsh(["--dry-run", "--busy-timeout", "5", "-e", "return projects.count(), #builds.list()"])
            #expect(read.status == 0, "\(read.stderr)")
            #expect(read.stdout == "0\t0\n")
            #expect(Date().timeIntervalSince(started) < 2.5)
            // Control: a dry run that writes waits for the lock like any writer.
            let write = try sandbox.opsh(["--dry-run", "--busy-timeout", "1", "-e", "projects.insert{ bundleIdentifier = 'x', name = 'X', gitRepositoryURL = '/x' }"])
            #expect(write.status == 3)
            #expect(write.stderr.contains("database is locked"), "\(write.stderr)")
        }
        // While a reading dry run runs, a backend writer with a 200 ms busy
        // timeout commits.
        let reader = try sandbox.start(opshExecutable, sandbox.withDatabase(["--dry-run", "-e", """
            io.stdout:write("reading\\n") io.stdout:flush()
            local t = os.clock() repeat projects.count() until os.clock() - t > 1.5
            """]))
        _ = readFirstLine(reader.standardOutput)
        let backend = try sandbox.run("/usr/bin/sqlite3", ["-cmd", ".timeout 200", sandbox.database,
                                                           "INSERT INTO telemetry (event, created_at) VALUES ('backend', 1)"])
        #expect(backend.status == 0, "the backend's write failed beside a reading dry run: \(backend.stderr)")
        #expect(reader.finish().status == 0)
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry WHERE event = 'backend'") == "1")
    }

    /// Who holds the lock (issue 16): a write that gives up waiting names
    /// the process holding the database's write lock, and `.locks` shows it.
    @Test func aLockedWriteNamesTheProcessHoldingTheLock() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            let write = try sandbox.opsh(["--busy-timeout", "0.5", "-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('x', 1)\")"])
            #expect(write.status == 3)
            #expect(write.stderr.contains("the database's lock is held by sqlite3 (pid "), "\(write.stderr)")
            #expect(write.stderr.contains(", writing)"))
            let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database], environment: sandbox.environment)
            terminal.expect("opsh> ")
            terminal.send(".locks\r")
            terminal.expect("locks held by sqlite3 (pid ")
            terminal.expect("opsh> ")
            terminal.send("\u{4}")
            #expect(terminal.waitForExit(timeout: 15) == 0)
        }
        // Control: with nobody holding it, .locks says so.
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send(".locks\r")
        terminal.expect("no other session holds a lock on")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
    }

    /// An interactive dry run does not hold the write lock while it waits
    /// at the prompt after writing (issue 17, section 3): it works on a
    /// private copy, each chunk sees the earlier ones' changes, and nothing
    /// reaches the database.
    @Test func anInteractiveDryRunDoesNotLockTheDatabaseAtThePrompt() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--dry-run"], environment: sandbox.environment)
        terminal.expect("works on a private copy")
        terminal.expect("opsh> ")
        terminal.send("projects.insert{ bundleIdentifier = 'dry', name = 'Dry', gitRepositoryURL = '/d' }\r")
        terminal.expect("opsh> ")
        // The backend writes while the dry run sits at its prompt.
        let worst = try backendWrites(sandbox)
        print("figure: backend writer's worst wait beside an interactive dry run that has written: \(Int(worst * 1000)) ms (sqlite3 start included)")
        // The next chunk sees the first one's row.
        terminal.send("print('seen ' .. projects.count())\r")
        terminal.expect("seen 1")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        terminal.expect("projects: 1 inserted")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(try sandbox.sqlite("SELECT count(*) FROM projects") == "0")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry WHERE event = 'backend'") == "5")
    }

    /// The same beside a database too large to copy (the limit set to
    /// 0 MB here): each chunk re-applies the session's earlier changes
    /// (SQLite's changesets) and is rolled back, so the lock is held only
    /// while a chunk runs; a row the backend changed since is reported.
    @Test func anInteractiveDryRunOnALargeDatabaseReplaysItsChangesPerChunk() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'a'), (2, 'b');")
        var environment = sandbox.environment
        environment["OPSH_DRY_RUN_COPY_LIMIT_MB"] = "0"
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--dry-run"], environment: environment)
        terminal.expect("too large for a private copy")
        terminal.expect("opsh> ")
        terminal.send("projects.insert{ bundleIdentifier = 'dry', name = 'Dry', gitRepositoryURL = '/d' }; db.exec(\"UPDATE notes SET body = 'dry' WHERE id = 1\")\r")
        terminal.expect("dry run: rolled back; it would have changed notes: 1 updated; projects: 1 inserted")
        terminal.expect("opsh> ")
        let worst = try backendWrites(sandbox)
        print("figure: backend writer's worst wait beside an interactive dry run on a database too large to copy: \(Int(worst * 1000)) ms (sqlite3 start included)")
        // The next chunks see the first one's changes, and the backend's.
        terminal.send("print('seen', db.value('SELECT count(*) FROM projects'), db.value('SELECT body FROM notes WHERE id = 1'), db.value(\"SELECT count(*) FROM telemetry WHERE event = 'backend'\"))\r")
        terminal.expect("seen\t1\tdry\t5")
        terminal.expect("opsh> ")
        // The backend changes a row the session changed: reported, and the
        // session's changes are dropped rather than overwriting it.
        try sandbox.sqlite("UPDATE notes SET body = 'theirs' WHERE id = 1")
        terminal.send("=db.value('SELECT body FROM notes WHERE id = 1')\r")
        terminal.expect("notes (1): changed since")
        terminal.expect("opsh> ")
        terminal.send("=db.value('SELECT body FROM notes WHERE id = 1')\r")
        terminal.expect("theirs")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(try sandbox.sqlite("SELECT count(*) FROM projects") == "0")
        #expect(try sandbox.sqlite("SELECT body FROM notes WHERE id = 1") == "theirs")
    }

    /// Five short writes by sqlite3 (a 200 ms busy timeout), as the backend
    /// makes them beside a dry-run shell: each must succeed in under 200 ms.
    /// Returns the longest.
    func backendWrites(_ sandbox: Sandbox, sourceLocation: SourceLocation = #_sourceLocation) throws -> Double {
        var worst = 0.0
        for index in 0..<5 {
            let started = Date()
            let write = try sandbox.run("/usr/bin/sqlite3", ["-cmd", ".timeout 200", sandbox.database,
                                                             "INSERT INTO telemetry (event, created_at) VALUES ('backend', \(index))"])
            worst = max(worst, Date().timeIntervalSince(started))
            #expect(write.status == 0, "the backend's write failed beside a dry-run shell: \(write.stderr)", sourceLocation: sourceLocation)
        }
        #expect(worst < 0.2, "the backend waited \(worst) s", sourceLocation: sourceLocation)
        return worst
    }

    /// A write that needs a migration the database lacks says so.
    @Test func aWriteThatNeedsAMissingMigrationSaysSo() throws {
        let sandbox = try Sandbox()
        // A database with a table of its own: opsh does not make it its own.
        try sandbox.sqlite("CREATE TABLE notes (body TEXT)")
        let write = try sandbox.opsh(["-e", "projects.insert{ bundleIdentifier = 'x', name = 'X', gitRepositoryURL = '/x' }"])
        #expect(write.status == 1)
        #expect(write.stderr.contains("no such table"), "\(write.stderr)")
        #expect(write.stderr.contains("this needs migrations the database lacks (001_initialSchema, 002_indexes, 003_audit, 004_runners, 005_auditChain, 006_schemeEnvironment, 007_runnerRegistry, 008_pinnedFunctions): run `opsh migrate` first"), "\(write.stderr)")
        // Control: after opsh migrate the same write works.
        #expect(try sandbox.opsh(["migrate"]).status == 0)
        let again = try sandbox.opsh(["-e", "projects.insert{ bundleIdentifier = 'x', name = 'X', gitRepositoryURL = '/x' }"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes") == "0")
    }
}
