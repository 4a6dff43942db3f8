import Foundation
import Testing

/// Jobs at the prompt (issue 26): `jobs.start` says the build's number and
/// how to follow and stop it, and `jobs.follow` ends with one line (status,
/// exit code, duration, lines) instead of the build's 20-line record that
/// pushed the log off the screen. Scripts still get the rows. One body,
/// both engines, through a real pty.
@Suite struct JobsAtThePromptTests {
    @Test(arguments: Engine.allCases) func startSaysHowToFollowAndFollowEndsWithOneLine(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let scheme = try fixture.scheme("Hello", "echo hello; echo world")
        let terminal = try fixture.promptWithJobs()

        terminal.send("jobs.start{ scheme = '\(scheme)', version = '1.0.0' }\r")
        terminal.expect("build #1 started — jobs.follow(\"")
        terminal.expect("> ")
        let id = try fixture.sql("SELECT id FROM builds")
        #expect(terminal.transcript.contains("build #1 started — jobs.follow(\"\(id)\") shows its output, jobs.cancel(\"\(id)\") stops it"),
                "\(terminal.transcript)")

        // What the hint says works, and ends with one line.
        let beforeFollow = terminal.transcript.count
        terminal.send("jobs.follow(\"\(id)\")\r")
        terminal.expect("world")
        terminal.expect("build \(id) #1 (1.0.0) succeeded, exit code 0, ")
        terminal.expect(" lines shown")
        terminal.expect("> ")
        let followed = String(terminal.transcript.dropFirst(beforeFollow))
        #expect(followed.range(of: #"succeeded, exit code 0, [0-9.]+ s, [0-9]+ lines shown"#, options: .regularExpression) != nil, "\(followed)")
        #expect(!followed.contains("versionString") && !followed.contains("schemeId"), "the build's record was printed:\n\(followed)")
        #expect(followed.components(separatedBy: "succeeded, exit code 0").count == 2, "the closing line once:\n\(followed)")

        // Control: the values are the rows they were; a build row from a
        // query prints as a record (or table) still.
        terminal.send("b = jobs.start{ scheme = '\(scheme)', version = '1.0.0' }\r")
        terminal.expect("> ")
        terminal.send("done = jobs.follow(b, { print = function() end })\r")
        terminal.expect("> ")
        terminal.send("b.buildNumber, done.status, done.exitCode\r")
        terminal.expect("2\tsucceeded\t0")
        terminal.expect("> ")
        terminal.send("db.first('SELECT versionString, buildNumber FROM builds WHERE buildNumber = 2')\r")
        terminal.expect("versionString")
        terminal.expect("> ")
        terminal.send(".q\r")
        #expect(terminal.waitForExit(timeout: 30) == 0)

        // A script gets the row itself.
        let script = try fixture.lua("""
            local b = jobs.start{ scheme = ..., version = '1.0.0' }
            local done = jobs.follow(b.id, { print = function() end })
            print(b.buildNumber, done.status, done.versionString)
            """, [scheme])
        #expect(script.status == 0, "\(script.stderr)")
        #expect(script.stdout.contains("3\tsucceeded\t1.0.0"), "\(script.stdout)")
    }
}
