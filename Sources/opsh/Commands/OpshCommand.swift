import ArgumentParser

/// `opsh`: the shell (the default) or `run`.
struct OpshCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "opsh",
        abstract: "The operator shell: Lua 5.4 over the backend's SQLite database.",
        usage: """
            opsh [options]                 the interactive shell
            opsh [options] -e CODE         run CODE, print what it returns
            opsh run [options] FILE [ARG…] run a script (FILE - reads stdin)
            """,
        discussion: """
            `opsh [options]` is `opsh shell [options]`: see `opsh shell --help`
            for the options every mode takes.

            \(ExitStatus.summary)
            """,
        subcommands: [ShellCommand.self, RunCommand.self],
        defaultSubcommand: ShellCommand.self)
}
