import ArgumentParser
import Foundation

/// `opsh [options]`: the interactive shell; `opsh -e CODE`: one chunk.
struct ShellCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shell",
        abstract: "The interactive shell, or one chunk with -e.",
        discussion: """
            Without a terminal on stdin, `opsh` runs the script it reads there.
            Without a terminal at all there is no prompt, colour or progress:
            stdout carries only what the script prints or returns, and opsh's
            own messages go to stderr as `opsh: error: …`.

            The shell keeps its history in $XDG_STATE_HOME/opsh/history
            (mode 0600) and runs $XDG_CONFIG_HOME/opsh/init.lua at start
            unless --no-init. Type .help at the prompt for its commands.

            \(ExitStatus.summary)
            """)

    @OptionGroup var options: CommonOptions

    @Option(name: .customShort("e"), help: ArgumentHelp("Run CODE and print the values it returns.", valueName: "code"))
    var code: String?

    func run() throws {
        if let code {
            BatchMode(options: options, source: .code(code), scriptArguments: [], lock: false).run()
        } else if isatty(0) == 1 {
            ShellMode(options: options).run()
        } else {
            BatchMode(options: options, source: .standardInput, scriptArguments: [], lock: false).run()
        }
    }
}
