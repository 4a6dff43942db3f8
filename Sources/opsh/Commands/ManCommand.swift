/// `opsh man`: opsh(1) as roff on stdout, made from the same help as
/// `--help` and `help()` (docs/manual-and-completions.md installs it).
struct ManCommand {
    static let help = CommandHelp(
        name: "opsh man",
        abstract: "Print the manual page opsh(1) as roff.",
        usage: "opsh man",
        discussion: """
            The page is made from the help of every command and of the Lua
            API. To read it: opsh man | man -l -
            To install it: opsh man > ~/.local/share/man/man1/opsh.1
            """)

    /// Parses the words after `opsh man`; nil for `--help`.
    init?(parsing words: ArraySlice<String>) throws {
        var scanner = ArgumentScanner(words, options: Self.help.options, command: Self.help)
        while let item = try scanner.next() {
            switch item {
            case .help: return nil
            case .option: break
            case let .operand(word): throw UsageError("unexpected argument '\(word)'", command: Self.help)
            }
        }
    }

    func run() -> Int32 {
        print(ManPage.render(commands: OpshCommand.commands, overview: OpshCommand.help), terminator: "")
        return ExitStatus.success.rawValue
    }
}
