import Foundation
import LuaRuntime
import Store

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
            opsh runners [options] [--all] the build runners: live ones, or all
            opsh man                       the manual page, opsh(1), as roff
            opsh completion bash|zsh|fish  a completion script for the shell
            opsh --version                 opsh's version, and its SQLite's and Lua's
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
                      ("runner", "Claim queued builds from the database and run them, until SIGTERM."),
                      ("runners", "List the live build runners (host, pid, builds held, heartbeat, version)."),
                      ("man", ManCommand.help.abstract),
                      ("completion", CompletionCommand.help.abstract)])

    /// Every subcommand's help, the default (`shell`) first: what `opsh
    /// man` and `opsh completion` are made of.
    static let commands: [CommandHelp] = [ShellCommand.help, RunCommand.help, MigrateCommand.help, RunsCommand.help,
                                          RunnerCommand.help, RunnersCommand.help, ManCommand.help, CompletionCommand.help]

    /// Parses the command line and runs the mode it names: its exit
    /// status; 0 after printing help; or throws a ``UsageError`` or ``Stop``.
    static func main(_ words: ArraySlice<String>) throws -> Int32 {
        switch words.first {
        case "run":
            guard let command = try RunCommand(parsing: words.dropFirst()) else { return printHelp(RunCommand.help) }
            return try command.run()
        case "shell":
            guard let command = try ShellCommand(parsing: words.dropFirst()) else { return printHelp(ShellCommand.help) }
            return try command.run()
        case "migrate":
            guard let command = try MigrateCommand(parsing: words.dropFirst()) else { return printHelp(MigrateCommand.help) }
            return try command.run()
        case "runs":
            guard let command = try RunsCommand(parsing: words.dropFirst()) else { return printHelp(RunsCommand.help) }
            return try command.run()
        case "runner":
            guard let command = try RunnerCommand(parsing: words.dropFirst()) else { return printHelp(RunnerCommand.help) }
            return try command.run()
        case "runners":
            guard let command = try RunnersCommand(parsing: words.dropFirst()) else { return printHelp(RunnersCommand.help) }
            return try command.run()
        case "man":
            guard let command = try ManCommand(parsing: words.dropFirst()) else { return printHelp(ManCommand.help) }
            return command.run()
        case "completion":
            guard let command = try CompletionCommand(parsing: words.dropFirst()) else { return printHelp(CompletionCommand.help) }
            return command.run()
        case "help":
            switch words.dropFirst().first {
            case nil: return printHelp(help)
            case "run": return printHelp(RunCommand.help)
            case "shell": return printHelp(ShellCommand.help)
            case "migrate": return printHelp(MigrateCommand.help)
            case "runs": return printHelp(RunsCommand.help)
            case "runner": return printHelp(RunnerCommand.help)
            case "runners": return printHelp(RunnersCommand.help)
            case "man": return printHelp(ManCommand.help)
            case "completion": return printHelp(CompletionCommand.help)
            case let other?: throw UsageError("no subcommand '\(other)' (there are: shell, run, migrate, runs, runner, runners, man, completion)", command: help)
            }
        case "-h", "--help":
            return printHelp(help)
        case "-V", "--version":
            print("opsh \(OpshVersion.current) (SQLite \(StoreVersions.sqlite), \(LuaRuntime.release))")
            return 0
        default:
            switch subcommandAfterOptions(words) {
            case let ("run", runWords)?:
                guard let command = try RunCommand(parsing: runWords) else { return printHelp(RunCommand.help) }
                return try command.run()
            case let ("migrate", migrateWords)?:
                guard let command = try MigrateCommand(parsing: migrateWords) else { return printHelp(MigrateCommand.help) }
                return try command.run()
            case let ("runs", runsWords)?:
                guard let command = try RunsCommand(parsing: runsWords) else { return printHelp(RunsCommand.help) }
                return try command.run()
            case let ("runner", runnerWords)?:
                guard let command = try RunnerCommand(parsing: runnerWords) else { return printHelp(RunnerCommand.help) }
                return try command.run()
            case let ("runners", runnersWords)?:
                guard let command = try RunnersCommand(parsing: runnersWords) else { return printHelp(RunnersCommand.help) }
                return try command.run()
            default:
                break
            }
            guard let command = try ShellCommand(parsing: words) else { return printHelp(ShellCommand.help) }
            return try command.run()
        }
    }

    /// `opsh --db X run FILE`: options before `run` (or `migrate`) are its
    /// own (a cron line is often written that way). The first word that is
    /// not an option and the words for its subcommand (the options before
    /// it, then the words after it), or nil when there is no such word.
    /// One scan of the words, whatever the subcommand.
    private static func subcommandAfterOptions(_ words: ArraySlice<String>) -> (String, ArraySlice<String>)? {
        var scanner = ArgumentScanner(words, options: ShellCommand.help.options, command: ShellCommand.help)
        while let item = try? scanner.next() {
            guard case let .operand(word) = item else { continue }
            let after = scanner.remaining
            return (word, words.prefix(words.count - after.count - 1) + after)
        }
        return nil
    }

    private static func printHelp(_ help: CommandHelp) -> Int32 {
        print(help.render(), terminator: "")
        return ExitStatus.success.rawValue
    }
}
