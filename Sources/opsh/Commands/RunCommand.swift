/// `opsh run FILE [ARG…]`: a batch script, as cron runs it.
struct RunCommand {
    static let lockOption = OptionSpec(long: "lock", help: "Hold a lock for the script so runs never overlap (default: on for a file, off for -).")
    static let noLockOption = OptionSpec(long: "no-lock", help: "Run without the lock.")

    static let help = CommandHelp(
        name: "opsh run",
        abstract: "Run a Lua script against the database.",
        usage: "opsh run [<options>] <file> [<arg> ...]",
        discussion: """
            The script's arguments are in the global `arg` (arg[0] is the
            script, arg[1] … the arguments) and in `...`, as `lua` passes
            them. Values the script returns are printed (as JSON with --json).
            Options go before the file (before or after `run`): every word
            after the file is the script's.

            By default a script file runs under a lock of its real path on
            the database (on SQLite a lock on the database file itself, on
            PostgreSQL an advisory lock on the server): a second run of the
            same script against the same database while the first still runs
            exits at once with status 75, whatever its environment (cron's
            too) and whatever name it gives the script or the database.

            \(ExitStatus.summary)
            """,
        arguments: [("<file>", "The Lua script, or - to read it from stdin."),
                    ("<arg>", "Arguments for the script.")],
        options: CommonOptions.specs + [lockOption, noLockOption])

    var options = CommonOptions()
    var lock: Bool?
    var file: String
    var arguments: [String]

    /// Parses the words after `opsh run`; nil for `--help`.
    init?(parsing words: ArraySlice<String>) throws {
        var scanner = ArgumentScanner(words, options: Self.help.options, command: Self.help)
        var file: String?
        scanning: while let item = try scanner.next() {
            switch item {
            case .help:
                return nil
            case let .option(spec, value):
                if spec.name == Self.lockOption.name { lock = true }
                else if spec.name == Self.noLockOption.name { lock = false }
                else { _ = try options.apply(spec, value: value, command: Self.help) }
            case let .operand(word):
                // Everything after the script is the script's own.
                file = word
                break scanning
            }
        }
        guard let file else { throw UsageError("missing the script: a <file>, or - for stdin", command: Self.help) }
        self.file = file
        self.arguments = scanner.remaining
        try options.validate(command: Self.help)
        if file == "-" && lock == true { throw UsageError("--lock needs a script file, not -", command: Self.help) }
    }

    func run() throws -> Int32 {
        let source: BatchMode.Source = file == "-" ? .standardInput : .file(file)
        return try BatchMode(options: options, source: source, scriptArguments: arguments, lock: lock ?? (file != "-")).run()
    }
}
