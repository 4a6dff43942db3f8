import ArgumentParser

/// The options every mode takes (the shell, `run`, `-e`).
struct CommonOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The database file (default: $OPSH_DB, else $XDG_DATA_HOME/opsh/opsh.sqlite).", valueName: "path"))
    var db: String?

    @Flag(name: .long, help: "Open the database read-only: SQLite refuses every write.")
    var readOnly = false

    @Flag(name: .long, help: "Run everything in one transaction, roll it back, and report on stderr the rows that would have been inserted, updated and deleted per table.")
    var dryRun = false

    @Option(name: .long, help: ArgumentHelp("Stop the run after this many seconds (exit status 124).", valueName: "seconds"))
    var timeout: Double?

    @Flag(name: .long, help: "Print the values a chunk returns as JSON (one document per value).")
    var json = false

    @Flag(name: [.customShort("q"), .long], help: "Print no banner, warnings or notes; errors still go to stderr.")
    var quiet = false

    @Option(name: .long, help: ArgumentHelp("How long to wait for another process's lock on the database before giving up (exit status 3).", valueName: "seconds"))
    var busyTimeout: Double = 5

    @Flag(name: .long, help: "Lua without io, os.execute, require, debug and load of bytecode.")
    var sandbox = false

    @Option(name: .long, help: ArgumentHelp("Most memory the Lua state may hold, in MiB; a script that needs more fails with 'not enough memory' (exit status 1).", valueName: "MiB"))
    var memoryLimit: Int?

    @Flag(name: .long, help: "Do not run $XDG_CONFIG_HOME/opsh/init.lua (the shell runs it at start).")
    var noInit = false

    func validate() throws {
        if let timeout, !(timeout > 0) { throw ValidationError("--timeout must be a positive number of seconds") }
        if let memoryLimit, memoryLimit < 1 { throw ValidationError("--memory-limit must be at least 1 MiB") }
        if !(busyTimeout >= 0) { throw ValidationError("--busy-timeout must be zero or more seconds") }
        if dryRun && readOnly { throw ValidationError("--dry-run needs a writable database: drop --read-only") }
    }
}
