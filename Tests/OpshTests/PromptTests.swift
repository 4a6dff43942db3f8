import Foundation
import Testing

/// Where am I (issue 16): the prompt and the banner name the database, the
/// environment (`OPSH_ENV`, red on a colour terminal) and the modes;
/// without a terminal none of it is printed.
@Suite struct PromptTests {
    @Test func thePromptNamesTheDatabaseTheEnvironmentAndTheModes() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        var environment = sandbox.environment
        environment["OPSH_ENV"] = "production"
        environment["TERM"] = "xterm"
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--read-only", "--sandbox"], environment: environment)
        terminal.expect("opsh on test.sqlite in production (read-only, sandbox)")
        terminal.expect("production test.sqlite [read-only, sandbox] opsh> ")
        terminal.send("1 + 1\r")
        terminal.expect("2")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        // Red on a colour terminal (what the transcript's raw bytes hold).
        let colour = try PseudoTerminal(arguments: ["--db", sandbox.database, "--dry-run"], environment: environment)
        colour.expect("test.sqlite [dry-run] opsh> ")
        colour.send("\u{4}")
        _ = colour.waitForExit(timeout: 15)
        #expect(colour.rawTranscript.contains("\u{1B}[1;31mproduction"), "\(colour.rawTranscript.debugDescription.prefix(300))")
        // Control: without OPSH_ENV or modes, just the database.
        let plain = try PseudoTerminal(arguments: ["--db", sandbox.database], environment: sandbox.environment)
        plain.expect("test.sqlite opsh> ")
        plain.send("\u{4}")
        #expect(plain.waitForExit(timeout: 15) == 0)
        #expect(!plain.transcript.contains("production"))
    }

    @Test func withoutATerminalNothingOfItIsPrinted() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        var environment = sandbox.environment
        environment["OPSH_ENV"] = "production"
        let piped = try sandbox.run(opshExecutable, ["--db", sandbox.database, "--read-only"], stdin: "return 40 + 2\n",
                                    environment: environment)
        #expect(piped.stdout == "42\n")
        #expect(!piped.stdout.contains("opsh>") && !piped.stderr.contains("production"), "\(piped.stdout) \(piped.stderr)")
    }
}
