import Foundation

/// `opsh`: the shell (the default), `run`, or `help`.
enum OpshCommand {
    static let help = CommandHelp(
        name: "opsh",
        abstract: "The operator shell: Lua 5.4 over the backend's SQLite database.",
        usage: """
            opsh [options]                 the interactive shell
            opsh [options] -e CODE         run CODE, print what it returns
            opsh run [options] FILE [ARG…] run a script (FILE - reads stdin)
            opsh migrate [options]         apply the migrations the database lacks
            opsh runs [options] [--overdue] recent runs; scripts that missed their period
            opsh runner [options]          claim queued builds and run them, until SIGTERM
            """,
        discussion: """
            `opsh [options]` is `opsh shell [options]`: see `opsh shell --help`
            for the options every mode takes.

            \(ExitStatus.summary)
            """,
        subcommands: [("shell (default)", "The interactive shell, or one chunk with -e."),
                      ("run", "Run a Lua script against the database."),
                      ("migrate", "Apply the built-in migrations the database lacks."),
                      ("runs", "Recent script runs from the audit trail; --overdue for missed ones."),
                      ("runner", "Claim queued builds from the database and run them, until SIGTERM.")])

    /// Parses the command line and runs the mode it names; prints help
    /// and exits 0, or throws a ``UsageError``.
    static func main(_ words: ArraySlice<String>) throws -> Never {
        switch words.first {
        case "run":
            guard let command = try RunCommand(parsing: words.dropFirst()) else { printHelp(RunCommand.help) }
            command.run()
        case "shell":
            guard let command = try ShellCommand(parsing: words.dropFirst()) else { printHelp(ShellCommand.help) }
            command.run()
        case "migrate":
            guard let command = try MigrateCommand(parsing: words.dropFirst()) else { printHelp(MigrateCommand.help) }
            command.run()
        case "runs":
            guard let command = try RunsCommand(parsing: words.dropFirst()) else { printHelp(RunsCommand.help) }
            command.run()
        case "runner":
            guard let command = try RunnerCommand(parsing: words.dropFirst()) else { printHelp(RunnerCommand.help) }
            command.run()
        case "help":
            switch words.dropFirst().first {
            case nil: printHelp(help)
            case "run": printHelp(RunCommand.help)
            case "shell": printHelp(ShellCommand.help)
            case "migrate": printHelp(MigrateCommand.help)
            case "runs": printHelp(RunsCommand.help)
            case "runner": printHelp(RunnerCommand.help)
            case let other?: throw UsageError("no subcommand '\(other)' (there are: shell, run, migrate, runs, runner)", command: help)
            }
        case "-h", "--help":
            printHelp(help)
        default:
            if let runWords = optionsThen("run", words) {
                guard let command = try RunCommand(parsing: runWords) else { printHelp(RunCommand.help) }
                command.run()
            }
            if let migrateWords = optionsThen("migrate", words) {
                guard let command = try MigrateCommand(parsing: migrateWords) else { printHelp(MigrateCommand.help) }
                command.run()
            }
            if let runsWords = optionsThen("runs", words) {
                guard let command = try RunsCommand(parsing: runsWords) else { printHelp(RunsCommand.help) }
                command.run()
            }
            if let runnerWords = optionsThen("runner", words) {
                guard let command = try RunnerCommand(parsing: runnerWords) else { printHelp(RunnerCommand.help) }
                command.run()
            }
            guard let command = try ShellCommand(parsing: words) else { printHelp(ShellCommand.help) }
            command.run()
        }
    }

    /// `opsh --db X run FILE`: options before `run` (or `migrate`) are its
    /// own (a cron line is often written that way). The words for it, or
    /// nil when the first word that is not an option is not `subcommand`.
    private static func optionsThen(_ subcommand: String, _ words: ArraySlice<String>) -> ArraySlice<String>? {
        var scanner = ArgumentScanner(words, options: ShellCommand.help.options, command: ShellCommand.help)
        while let item = try? scanner.next() {
            guard case let .operand(word) = item else { continue }
            guard word == subcommand else { return nil }
            let after = scanner.remaining
            return words.prefix(words.count - after.count - 1) + after
        }
        return nil
    }

    private static func printHelp(_ help: CommandHelp) -> Never {
        print(help.render(), terminator: "")
        exit(ExitStatus.success.rawValue)
    }
}
