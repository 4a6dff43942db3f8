import Foundation

/// `opsh [options]`: the interactive shell; `opsh -e CODE`: one chunk.
struct ShellCommand {
    static let codeOption = OptionSpec(short: "e", valueName: "code",
                                       help: "Run CODE and print the values it returns.")

    static let help = CommandHelp(
        name: "opsh shell",
        abstract: "The interactive shell, or one chunk with -e.",
        usage: "opsh [shell] [<options>] [-e <code>]",
        discussion: """
            Without a terminal on stdin, `opsh` runs the script it reads there.
            Without a terminal at all there is no prompt, colour or progress:
            stdout carries only what the script prints or returns, and opsh's
            own messages go to stderr as `opsh: error: …`.

            The shell keeps its history in $XDG_STATE_HOME/opsh/history
            (mode 0600) and runs $XDG_CONFIG_HOME/opsh/init.lua at start
            unless --no-init. Type .help at the prompt for its commands.

            \(ExitStatus.summary)
            """,
        options: CommonOptions.specs + [codeOption])

    var options = CommonOptions()
    var code: String?

    /// Parses the words after `opsh` (or `opsh shell`); nil for `--help`.
    init?(parsing words: ArraySlice<String>) throws {
        var scanner = ArgumentScanner(words, options: Self.help.options, command: Self.help)
        while let item = try scanner.next() {
            switch item {
            case .help:
                return nil
            case let .option(spec, value):
                if spec.name == Self.codeOption.name {
                    code = value
                } else {
                    _ = try options.apply(spec, value: value, command: Self.help)
                }
            case let .operand(word):
                throw UsageError("unexpected argument '\(word)' (to run a script: opsh run \(word))", command: Self.help)
            }
        }
        try options.validate(command: Self.help)
    }

    func run() throws -> Int32 {
        if let code {
            return try BatchMode(options: options, source: .code(code), scriptArguments: [], lock: false).run()
        } else if isatty(0) == 1 {
            return try ShellMode(options: options).run()
        } else {
            return try BatchMode(options: options, source: .standardInput, scriptArguments: [], lock: false).run()
        }
    }
}
