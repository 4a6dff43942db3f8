import Foundation
import Testing

/// The private copy an interactive `--dry-run` works on (README, "Beside a
/// live backend") lives in the temporary folder while the shell runs.
/// SQLite only: on PostgreSQL a dry run is one transaction on the server,
/// with no copy.
@Suite struct DryRunCopyTests {
    /// The copies' folders in `temporary`.
    static func copies(in temporary: String) -> Set<String> {
        Set(((try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []).filter { $0.hasPrefix("opsh-dry-run-") })
    }

    /// A dry-run shell that is killed leaves its copy behind; the next dry
    /// run removes it when it starts (issue 24, item 15), and removes
    /// nothing else: not the copy of a dry run still running, not a folder
    /// named like a copy that opsh did not make.
    @Test func aKilledDryRunsCopyIsRemovedByTheNextOne() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let temporary = sandbox.root + "/tmp"
        try FileManager.default.createDirectory(atPath: temporary, withIntermediateDirectories: true)
        var environment = sandbox.environment
        environment["TMPDIR"] = temporary
        func dryRunShell() -> PseudoTerminal? {
            let terminal = try? PseudoTerminal(arguments: ["--db", sandbox.database, "--dry-run"], environment: environment)
            terminal?.expect("works on a private copy")
            terminal?.expect("opsh> ")
            return terminal
        }
        // Someone's own folder that happens to be named like a copy.
        let lookalike = "opsh-dry-run-999999-1-0123456789abcdef"
        try FileManager.default.createDirectory(atPath: temporary + "/" + lookalike, withIntermediateDirectories: true)
        try "mine".write(toFile: temporary + "/\(lookalike)/test.sqlite", atomically: false, encoding: .utf8)

        // A dry run killed at its prompt: its copy stays behind.
        guard let killed = dryRunShell() else { return }
        let killedCopies = Self.copies(in: temporary).subtracting([lookalike])
        #expect(killedCopies.count == 1, "\(killedCopies)")
        kill(killed.pid, SIGKILL)
        #expect(killed.waitForExit(timeout: 15) == 128 + SIGKILL)
        #expect(Self.copies(in: temporary).isSuperset(of: killedCopies))

        // A dry run still running.
        guard let running = dryRunShell() else { return }
        let runningCopies = Self.copies(in: temporary).subtracting(killedCopies).subtracting([lookalike])
        #expect(runningCopies.count == 1, "\(runningCopies)")

        // The next dry run removes the killed one's copy, and only that.
        guard let next = dryRunShell() else { return }
        let now = Self.copies(in: temporary)
        #expect(now.isDisjoint(with: killedCopies), "\(now)")
        #expect(now.isSuperset(of: runningCopies.union([lookalike])), "\(now)")
        #expect(try String(contentsOfFile: temporary + "/\(lookalike)/test.sqlite", encoding: .utf8) == "mine")

        // Control: the shells that end remove their own copies.
        for terminal in [next, running] {
            terminal.send("\u{4}")
            #expect(terminal.waitForExit(timeout: 15) == 0)
        }
        #expect(Self.copies(in: temporary) == [lookalike])
    }
}
