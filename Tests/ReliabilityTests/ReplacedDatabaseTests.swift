import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The database file deleted, or replaced by another file (renamed over
/// it, as `mv backup.sqlite opsh.sqlite` does), while opsh has it open.
/// SQLite keeps using the file it opened, so writes would go to a file
/// nobody opens again. The shell (on a real pty) says so, runs Lua, refuses
/// writes with the reason and rescues the open copy with backup(); a
/// script that ran through it exits 3 saying so.
@Suite struct ReplacedDatabaseTests {
    static let insertFirst = #"projects.insert{ bundleIdentifier = "first", name = "First", gitRepositoryURL = "/first" }"#
    static let insertSecond = #"projects.insert{ bundleIdentifier = "second", name = "Second", gitRepositoryURL = "/second" }"#

    /// Another opsh database, ready to be renamed over the open one.
    static func replacement(_ scratch: Scratch) throws -> String {
        let other = scratch.root + "/data/other.sqlite"
        let made = try scratch.run(opshExecutable, ["--db", other, "--create", "-e", #"projects.insert{ bundleIdentifier = "other", name = "Other", gitRepositoryURL = "/o" }"#])
        #expect(made.status == 0, "\(made.stderr)")
        _ = try scratch.sqlite("PRAGMA wal_checkpoint(TRUNCATE)", file: other)
        return other
    }

    /// Lua goes on, writes are refused with the reason, and backup()
    /// rescues the copy opsh still has open (issue 17, section 6).
    @Test func theShellRefusesWritesToAFileThatIsGoneAndRescuesIt() throws {
        var outcomes: [String] = []
        for replace in [false, true] {
            let scratch = try Scratch()
            #expect(try scratch.opsh(["-e", Self.insertFirst]).status == 0)
            let other = replace ? try Self.replacement(scratch) : nil
            let shell = try PseudoTerminal(arguments: ["--db", scratch.database, "--no-init"], environment: scratch.environment)
            shell.expect("opsh on ")
            shell.send("print('count', projects.count())\n")
            shell.expect("count\t1")

            if let other {
                #expect(rename(other, scratch.database) == 0)
            } else {
                #expect(unlink(scratch.database) == 0)
            }
            let after = fileBytes(scratch.database)
            // Printed text built at run time: the terminal echoes the typed line.
            shell.send("x = 1 + 1 print('x is ' .. x)\n")
            shell.expect(replace ? "was replaced by another file after opsh opened it" : "was deleted after opsh opened it")
            shell.expect("x is 2")
            shell.send(Self.insertSecond + " print('wrote ' .. 'second')\n")
            shell.expect("writes are refused")
            let rescue = scratch.root + "/rescue.sqlite"
            shell.send("print('rescued ' .. backup(\(luaString(rescue))).path)\n")
            shell.expect("rescued ")
            shell.send(".quit\n")
            let status = shell.waitForExit()
            #expect(status == 0, "the shell ended with \(String(describing: status))")
            #expect(!shell.transcript.contains("wrote second"))
            #expect(fileBytes(scratch.database) == after, "the file now at the path changed")
            let rescued = try scratch.sqlite("SELECT count(*) FROM projects", file: rescue)
            #expect(rescued == "1")
            outcomes.append("\(replace ? "replaced" : "deleted"): Lua ran, the write refused with the reason, backup() rescued \(rescued) project(s), shell exit \(status.map(String.init) ?? "none") on .quit")
        }
        reportFigure("database file gone while the shell is open: " + outcomes.joined(separator: "; "))
    }

    @Test func aScriptWhoseFileWasDeletedOrReplacedExits3() throws {
        var outcomes: [String] = []
        for replace in [false, true] {
            let scratch = try Scratch()
            let go = scratch.root + "/go"
            let script = try scratch.script("steps.lua", """
                \(Self.insertFirst)
                io.stdout:write("first done\\n") io.stdout:flush()
                while not io.open(\(luaString(go))) do opsh.wait(0.02) end
                \(Self.insertSecond)
                print("second done")
                """)
            let other = replace ? try Self.replacement(scratch) : nil
            let child = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", script]))
            let first = readFirstLine(child.standardOutput)
            #expect(String(decoding: first, as: UTF8.self).contains("first done"))
            if let other {
                #expect(rename(other, scratch.database) == 0)
            } else {
                #expect(unlink(scratch.database) == 0)
            }
            #expect(FileManager.default.createFile(atPath: go, contents: Data()))
            let after = fileBytes(scratch.database)
            let result = scratch.finish(child, stdoutPrefix: first)
            #expect(fileBytes(scratch.database) == after)
            #expect(result.status == 3, "exit \(result.status): \(result.stderr)")
            #expect(result.stderr.contains(replace ? "was replaced by another file" : "was deleted")
                    && result.stderr.contains("what it writes there is lost"), "\(result.stderr)")
            // What is at the path was not written by opsh after the swap. (Its
            // content is not checked: the old -wal left next to it is read
            // with it by SQLite; see RELIABILITY.md.)
            outcomes.append("\(replace ? "replaced" : "deleted"): exit \(result.status)")
        }
        reportFigure("database file gone under a running script: " + outcomes.joined(separator: ", ") + ", stderr says its writes are lost")
    }
}
