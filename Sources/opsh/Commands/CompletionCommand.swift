/// `opsh completion bash|zsh|fish`: a completion script for the shell
/// named, for subcommands and their options (docs/manual-and-completions.md
/// installs it).
struct CompletionCommand {
    static let help = CommandHelp(
        name: "opsh completion",
        abstract: "Print a completion script for bash, zsh or fish.",
        usage: "opsh completion bash|zsh|fish",
        discussion: """
            To use it at once: source <(opsh completion bash)
            To install it: opsh completion bash > ~/.local/share/bash-completion/completions/opsh
            (zsh: a file _opsh in a folder of $fpath; fish: ~/.config/fish/completions/opsh.fish).
            """,
        arguments: [("<shell>", "bash, zsh or fish.")])

    let shell: CompletionScript.Shell

    /// Parses the words after `opsh completion`; nil for `--help`.
    init?(parsing words: ArraySlice<String>) throws {
        var scanner = ArgumentScanner(words, options: Self.help.options, command: Self.help)
        var shell: CompletionScript.Shell?
        while let item = try scanner.next() {
            switch item {
            case .help: return nil
            case .option: break
            case let .operand(word):
                guard shell == nil else { throw UsageError("unexpected argument '\(word)'", command: Self.help) }
                guard let named = CompletionScript.Shell(rawValue: word) else {
                    throw UsageError("no completion for '\(word)' (there are: bash, zsh, fish)", command: Self.help)
                }
                shell = named
            }
        }
        guard let shell else { throw UsageError("missing the shell: bash, zsh or fish", command: Self.help) }
        self.shell = shell
    }

    func run() -> Int32 {
        let commands = OpshCommand.commands.map { help in
            let name = String(help.name.dropFirst("opsh ".count))
            let operands: CompletionScript.Operands
            switch name {
            case "run": operands = .files
            case "completion": operands = .shells
            default: operands = .none
            }
            return CompletionScript.Command(name: name, abstract: help.abstract, options: help.options, operands: operands)
        } + [CompletionScript.Command(name: "help", abstract: "Show the help of a subcommand.", options: [], operands: .subcommands)]
        print(CompletionScript.render(shell, commands: commands), terminator: "")
        return ExitStatus.success.rawValue
    }
}
