import ArgumentParser

/// `opsh run FILE [ARG…]`: a batch script, as cron runs it.
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run a Lua script against the database.",
        discussion: """
            The script's arguments are in the global `arg` (arg[0] is the
            script, arg[1] … the arguments) and in `...`, as `lua` passes
            them. Values the script returns are printed (as JSON with --json).

            By default a script file runs under a lock named after its real
            path (in $XDG_RUNTIME_DIR/opsh/locks, else
            $XDG_STATE_HOME/opsh/locks): a second run of the same script while
            the first still runs exits at once with status 75.

            \(ExitStatus.summary)
            """)

    @OptionGroup var options: CommonOptions

    @Flag(inversion: .prefixedNo, help: "Hold a lock for the script so runs never overlap (default: on for a file, off for -).")
    var lock: Bool?

    @Argument(help: ArgumentHelp("The Lua script, or - to read it from stdin.", valueName: "file"))
    var file: String

    @Argument(parsing: .captureForPassthrough, help: ArgumentHelp("Arguments for the script.", valueName: "arg"))
    var arguments: [String] = []

    func validate() throws {
        if file == "-" && lock == true { throw ValidationError("--lock needs a script file, not -") }
    }

    func run() throws {
        let source: BatchMode.Source = file == "-" ? .standardInput : .file(file)
        BatchMode(options: options, source: source, scriptArguments: arguments, lock: lock ?? (file != "-")).run()
    }
}
