import Foundation
import Testing

/// A temporary home for one test (``TestFolder``), running opsh and
/// sqlite3 through Foundation's `Process`.
final class Sandbox: TestFolder, @unchecked Sendable {
    init() throws {
        try super.init(prefix: "opsh-tests-")
    }

    /// Runs a statement with the sqlite3 CLI (another process).
    @discardableResult
    func sqlite(_ sql: String) throws -> String {
        let result = try run("/usr/bin/sqlite3", [database, sql])
        #expect(result.status == 0, "sqlite3 failed: \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Creates and migrates the database.
    func createDatabase() throws {
        let result = try opsh(["-e", "return 1"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    /// Runs opsh with `arguments` (and `--db` to the sandbox's database).
    func opsh(_ arguments: [String], stdin: String? = nil, database: Bool = true) throws -> Result {
        try run(opshExecutable, withDatabase(arguments, database: database), stdin: stdin)
    }

    /// Runs `body` while a sqlite3 process holds the database's write lock
    /// (taken by `begin`, with a row inserted); it commits when `body`
    /// returns.
    /// Runs `script` on `database` as one opsh process that stops to read a
    /// line from its standard input once it has printed `pausedAt` (its
    /// first line when nil): `meanwhile` runs then (another process's
    /// change, a backend's migration), and the script goes on.
    func opshPausing(_ script: String, on database: TestDatabase, pausedAt: String? = nil,
                     meanwhile: () throws -> Void) throws -> TestFolder.Result {
        let session = try start(opshExecutable, ["--db", database.db, "-e", script], keepingStdinOpen: true)
        let output = pausedAt.map { readLines(session.standardOutput, until: $0) } ?? readFirstLine(session.standardOutput)
        try meanwhile()
        session.write("go on\n")
        session.closeInput()
        return session.finish(stdoutPrefix: output)
    }

    func whileAnotherProcessHolds(_ begin: String, _ body: () throws -> Void) throws {
        // sqlite3 writes the flag file once it holds the lock (a probe that
        // took the lock itself could be what keeps sqlite3 from taking it).
        let held = root + "/held-" + UUID().uuidString
        let holder = try start("/usr/bin/sqlite3", [database], stdin: """
            \(begin)
            INSERT INTO telemetry (event, created_at) VALUES ('x', 0);
            .output \(held)
            .print held
            .output stdout

            """, keepingStdinOpen: true)
        defer {
            holder.write("COMMIT;\n")
            holder.closeInput()
            _ = finish(holder)
        }
        #expect(waitForFile(held, timeout: 30) == "held", "sqlite3 never took the lock with \(begin)")
        try body()
    }

    /// Starts a child (posix_spawn); its standard input gets `stdin` and is
    /// closed, unless `keepingStdinOpen` (the caller writes more with
    /// `write` and ends with `closeInput`).
    func start(_ executable: String, _ arguments: [String], stdin: String? = nil,
               keepingStdinOpen: Bool = false, environment: [String: String]? = nil) throws -> ChildProcess {
        try ChildProcess.start(executable, arguments, environment: environment ?? self.environment,
                               stdin: stdin, keepingStdinOpen: keepingStdinOpen)
    }

    func run(_ executable: String, _ arguments: [String], stdin: String? = nil,
             environment: [String: String]? = nil) throws -> Result {
        finish(try start(executable, arguments, stdin: stdin, environment: environment))
    }

    /// Reads both pipes to their end, then reaps the child.
    func finish(_ child: ChildProcess) -> Result {
        child.finish()
    }
}


/// A suite of end-to-end tests on the shared throwaway PostgreSQL server:
/// opsh on a database URL, and a new database with opsh's schema.
protocol PostgresSuite {
    var server: PostgresServer { get }
    var sandbox: Sandbox { get }
}

extension PostgresSuite {
    /// opsh on `url` (no SQLite database of the sandbox's).
    func opsh(_ url: String, _ arguments: [String]) throws -> Sandbox.Result {
        try sandbox.opsh(["--db", url] + arguments, database: false)
    }

    /// A new PostgreSQL database with opsh's schema (`--create`).
    func createdDatabase() throws -> String {
        let url = try server.makeDatabase()
        let created = try opsh(url, ["--create", "-e", "return db.engine"])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(created.stdout.contains("postgresql"))
        return url
    }
}

extension Sandbox {
    /// The shell on `database` in a pty, at its first prompt: what the
    /// prompt suites type into.
    func shell(_ database: TestDatabase, _ extra: [String] = []) throws -> PseudoTerminal {
        let terminal = try PseudoTerminal(arguments: ["--db", database.db] + extra, environment: environment)
        terminal.expect("> ")
        return terminal
    }
}
