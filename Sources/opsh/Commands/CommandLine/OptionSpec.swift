/// One option a command takes: its spellings, whether it takes a value,
/// and its line in `--help`.
///
/// opsh parses its few options by hand instead of through
/// swift-argument-parser: that library finds a command's options by
/// reflection, and the runtime's protocol-conformance scans it triggers
/// were most of the time `opsh -e 'return 1'` spent before running Lua.
struct OptionSpec {
    /// `--db` is "db"; nil for a short option only (`-e`).
    var long: String?
    /// `-q` is "q".
    var short: Character?
    /// The value's name in help (`--timeout <seconds>`); nil for a flag.
    var valueName: String?
    let help: String
    /// Shown as `(default: …)` after the help.
    var defaultValue: String?

    var takesValue: Bool { valueName != nil }

    /// How commands tell their options apart.
    var name: String { long ?? String(short!) }

    /// `-q, --quiet` / `--db <path>`: the left column of help.
    var synopsis: String {
        var text = [short.map { "-\($0)" }, long.map { "--\($0)" }].compactMap { $0 }.joined(separator: ", ")
        if let valueName { text += " <\(valueName)>" }
        return text
    }
}

/// A bad command line. Its message names what was wrong; opsh prints it
/// with the command's usage and exits with status 2.
struct UsageError: Error, CustomStringConvertible {
    let message: String
    /// The command whose usage to show (`opsh run`, `opsh`).
    var command: CommandHelp

    init(_ message: String, command: CommandHelp) {
        self.message = message
        self.command = command
    }

    var description: String {
        """
        opsh: error: \(message)
        Usage: \(command.usage.split(separator: "\n").joined(separator: "\n       "))
          See '\(command.name) --help' for more information.
        """
    }
}
