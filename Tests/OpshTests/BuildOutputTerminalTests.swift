import Foundation
import Testing

/// Text from a build or the database never drives the operator's
/// terminal: `jobs.follow` and a runner's stderr show control characters
/// (C0 and C1 but tab) visibly, and a NUL inside a log line no longer
/// hides the rest of it (issue "Every hole found by attack", item 29).
@Suite struct BuildOutputTerminalTests {
    /// What a hostile build prints: a window title and the clipboard (OSC
    /// 52), a cursor moved up over the line before, the alternate screen,
    /// a C1 CSI, a NUL in the middle of a line, and a tab.
    static let hostileOutput = #"printf '\033]52;c;ZXZpbA==\007osc52\n\033[1A\033[2Kup\n\033[?1049halt\n\302\23331mc1\nnul:\000:after\ntab:\there\n'"#

    /// Bytes a terminal acts on: ESC, BEL, NUL and the C1 controls (as UTF-8).
    static func controlBytes(_ text: String) -> [String] {
        var found: [String] = []
        for scalar in text.unicodeScalars {
            let value = scalar.value
            if (value < 0x20 && value != 0x0A && value != 0x09) || value == 0x7F || (0x80...0x9F).contains(value) {
                found.append(String(format: "U+%04X", value))
            }
        }
        return found
    }

    @Test(arguments: Engine.allCases)
    func followAndTheRunnerShowControlCharactersVisiblyAndANulHidesNothing(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        // A commit whose subject sets the window title: git's "HEAD is now at …" shows it.
        try sh("""
            cd '\(fixture.repository)' && echo 2.0.0 > version.txt && git commit -q -am "$(printf 'subject \\033]0;pwned-title\\007end')" && git tag 2.0.0
            """)
        let scheme = try fixture.scheme("Evil", Self.hostileOutput)
        let escape = fixture.engine == .sqlite ? "char(27)" : "chr(27)"
        try fixture.sql("UPDATE schemes SET name = 'Evil' || \(escape) || '[2J' WHERE id = '\(scheme)'")

        let followed = try fixture.lua("jobs.follow(jobs.start{ scheme = ..., version = '2.0.0' })", [scheme])
        #expect(followed.status == 0, "\(followed.stderr)")
        #expect(Self.controlBytes(followed.stdout) == [], "\(Self.controlBytes(followed.stdout))")
        for shown in ["␛]52;c;ZXZpbA==␇osc52", "␛[1A␛[2Kup", "␛[?1049halt", "<U+009B>31mc1", "nul:␀:after", "tab:\there",
                      "subject ␛]0;pwned-title␇end"] {
            #expect(followed.stdout.contains(shown), "\(shown) not in \(followed.stdout)")
        }

        // A runner's stderr names the scheme visibly.
        let queued = try fixture.enqueue(scheme, version: "2.0.0")
        let runner = try fixture.startRunner()
        let ended = try fixture.waitForEnd(queued)
        let said = fixture.stop(runner)
        #expect(ended == "succeeded", "\(said.stderr)")
        #expect(said.stderr.contains("com.example.app Evil␛[2J #2"), "\(said.stderr)")
        #expect(Self.controlBytes(said.stderr) == [], "\(said.stderr)")

        // Control: the database keeps what the build printed, byte for byte
        // (but the NUL, which neither engine's text holds): only what opsh
        // shows is made visible.
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(queued)' AND content = \(escape) || '[1A' || \(escape) || '[2Kup'") == "1")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE buildId = '\(queued)' AND content = 'nul:␀:after'") == "1")
    }

    /// Ctrl-C in `jobs.follow` at the prompt stops the following, not the
    /// build, and says so (it said the chunk was rolled back and nothing
    /// was kept, while the build went on); the build is still running, and
    /// `jobs.cancel` ends it.
    @Test(arguments: Engine.allCases)
    func ctrlCInFollowSaysTheBuildStillRuns(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let scheme = try fixture.scheme("Slow", "echo started; sleep 60; echo done")
        let terminal = try fixture.promptWithJobs()
        terminal.send("b = jobs.start{ scheme = '\(scheme)', version = '1.0.0' }\r")
        terminal.expect("> ")
        terminal.send("jobs.follow(b.id)\r")
        terminal.expect("started")
        terminal.send("\u{3}")
        terminal.expect("interrupted: stopped following; build #1 still runs (jobs.cancel(\"")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("nothing it changed was kept"), "\(terminal.transcript)")
        #expect(try fixture.sql("SELECT status FROM builds") == "running")
        terminal.send("jobs.cancel(b.id)\r")
        terminal.expect("> ")
        #expect(waitUntil(30) { (try? fixture.sql("SELECT status FROM builds")) == "cancelled" })
        terminal.send(".q\r")
        #expect(terminal.waitForExit(timeout: 30) == 0)
    }
}
