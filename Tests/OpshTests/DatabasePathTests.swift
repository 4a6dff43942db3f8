import Foundation
import Testing

/// Which database opsh opens and when it makes one (issue 13, items 7, 8
/// and 9): a mistyped path never succeeds on an empty database, new files
/// are the owner's only, and the run lock is per script and database.
@Suite struct DatabasePathTests {
    func mode(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? Int
    }

    @Test func aNamedDatabaseThatDoesNotExistIsRefused() throws {
        let sandbox = try Sandbox()
        let missing = sandbox.root + "/nonexistent/dir/x.sqlite"
        let explicit = try sandbox.run(opshExecutable, ["--db", missing, "-e", "return projects.count()"])
        #expect(explicit.status == 3, "\(explicit.stderr)")
        #expect(explicit.stderr.contains("no database at \(missing)"))
        #expect(explicit.stderr.contains("--create"))
        #expect(explicit.stdout == "")
        #expect(!FileManager.default.fileExists(atPath: sandbox.root + "/nonexistent"))
        // The same through OPSH_DB, and for the shell.
        var environment = sandbox.environment
        environment["OPSH_DB"] = missing
        let fromEnvironment = try sandbox.run(opshExecutable, ["-e", "return 1"], environment: environment)
        #expect(fromEnvironment.status == 3, "\(fromEnvironment.stderr)")
        #expect(fromEnvironment.stderr.contains("no database at \(missing)"))
        let shell = try sandbox.run(opshExecutable, ["--db", missing], stdin: "return 1\n")
        #expect(shell.status == 3)
        #expect(!FileManager.default.fileExists(atPath: sandbox.root + "/nonexistent"))
        // Control: --create makes it, folders included, owner-only.
        let created = try sandbox.run(opshExecutable, ["--db", missing, "--create", "-e", "return projects.count()"])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(created.stdout == "0\n")
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: missing + suffix) {
            #expect(mode(missing + suffix) == 0o600, "\(suffix): \(String(mode(missing + suffix) ?? 0, radix: 8))")
        }
        #expect(mode(missing) == 0o600)
        // Once it exists, no --create is needed.
        #expect(try sandbox.run(opshExecutable, ["--db", missing, "-e", "return 1"]).status == 0)
    }

    @Test func anEmptyPathIsAUsageError() throws {
        let sandbox = try Sandbox()
        let empty = try sandbox.run(opshExecutable, ["--db", "", "-e", "return 1"])
        #expect(empty.status == 2)
        #expect(empty.stderr.contains("--db needs a path"))
        var environment = sandbox.environment
        environment["OPSH_DB"] = ""
        let emptyVariable = try sandbox.run(opshExecutable, ["-e", "return 1"], environment: environment)
        #expect(emptyVariable.status == 2)
        #expect(emptyVariable.stderr.contains("OPSH_DB is set but empty"))
        #expect(!FileManager.default.fileExists(atPath: sandbox.root + "/data/opsh/opsh.sqlite"))
    }

    @Test func theDefaultDatabaseIsMadeOnFirstUseOwnerOnly() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.run(opshExecutable, ["-e", "return projects.count()"])
        #expect(result.status == 0, "\(result.stderr)")
        let path = sandbox.root + "/data/opsh/opsh.sqlite"
        #expect(mode(path) == 0o600)
        for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            #expect(mode(path + suffix) == 0o600)
        }
    }

    @Test func theRunLockIsPerScriptAndDatabase() throws {
        let sandbox = try Sandbox()
        let other = sandbox.root + "/data/other.sqlite"
        #expect(try sandbox.opsh(["-e", "return 1"]).status == 0)
        #expect(try sandbox.run(opshExecutable, ["--db", other, "--create", "-e", "return 1"]).status == 0)
        let flag = sandbox.root + "/started"
        let release = sandbox.root + "/release"
        let script = try sandbox.script("nightly.lua", """
            if arg[1] == "hold" then
              io.open("\(flag)", "w"):close()
              while not io.open("\(release)") do opsh.wait(0.02) end
            end
            print("done")
            """)
        let first = try sandbox.start(opshExecutable, ["run", "--db", sandbox.database, script, "hold"])
        #expect(waitUntil(5) { FileManager.default.fileExists(atPath: flag) })
        // Another database: runs at once.
        let elsewhere = try sandbox.run(opshExecutable, ["run", "--db", other, script])
        #expect(elsewhere.status == 0, "\(elsewhere.stderr)")
        #expect(elsewhere.stdout == "done\n")
        // The same database under another name (a symbolic link): the same lock.
        let alias = sandbox.root + "/alias.sqlite"
        symlink(sandbox.database, alias)
        let same = try sandbox.run(opshExecutable, ["run", "--db", alias, script])
        #expect(same.status == 75, "\(same.stderr)")
        #expect(same.stderr.contains("another run holds the lock"))
        FileManager.default.createFile(atPath: release, contents: Data())
        #expect(sandbox.finish(first).status == 0)
    }
}
