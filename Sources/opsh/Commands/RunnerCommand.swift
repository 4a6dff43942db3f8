/// `opsh runner`: a long-running process (for systemd or a container) that
/// claims queued builds from the shared database and runs them (README,
/// "Build runners").
struct RunnerCommand {
    static let concurrencyOption = OptionSpec(long: "concurrency", valueName: "n",
                                              help: "How many builds this runner runs at once (default: the number of cores).")
    static let heartbeatOption = OptionSpec(long: "heartbeat", valueName: "seconds",
                                            help: "How often this runner records a heartbeat for its builds and looks for stale ones; another runner takes a build back after three missed heartbeats.",
                                            defaultValue: "10")
    static let schemeOption = OptionSpec(long: "scheme", valueName: "id-or-name",
                                         help: "Run only builds of this scheme, given by id or by name (a name matches that scheme in every project); repeat for several. Default: every scheme.")
    static let maxAttemptsOption = OptionSpec(long: "max-attempts", valueName: "n",
                                              help: "How many times a build whose runner stopped is started before it is marked failed instead of requeued.",
                                              defaultValue: "3")

    static let keepWorkspacesOption = OptionSpec(long: "keep-workspaces", valueName: "n",
                                                 help: "How many builds of each scheme keep their workspace: when a build ends, older ended builds' workspaces of its scheme go, and those of deleted builds (0: each when its build ends).",
                                                 defaultValue: "5")

    static let workspacesOption = OptionSpec(long: "workspaces", valueName: "folder",
                                             help: "Where builds check out (a folder per build and attempt). Default: workspaces/ next to an SQLite database; on PostgreSQL, workspaces/ in opsh's data folder ($XDG_DATA_HOME/opsh).")

    static let help = CommandHelp(
        name: "opsh runner",
        abstract: "Claim queued builds from the database and run them, until SIGTERM.",
        usage: "opsh runner [<options>] [--concurrency <n>] [--heartbeat <seconds>] [--scheme <id-or-name> …]",
        discussion: """
            Runs as jobs.start does (a fresh checkout under workspaces/ next
            to the database, the scheme's command with /bin/sh -c, the log
            into buildLogs), for every queued build nobody holds: those
            queued by jobs.enqueue, jobs.create, builds.create or the backend.
            Several runners share the queue, on one machine (SQLite) or many
            (--db postgresql://…); each build is claimed by one of them in one
            short transaction (on PostgreSQL with SELECT … FOR UPDATE SKIP
            LOCKED, heartbeats judged by the server's clock).

            Each running build records its runner (host, pid, start time) and
            a heartbeat. A build whose runner missed three heartbeats is taken
            back by another runner: requeued with a log line naming the lost
            runner, or marked failed once it was started --max-attempts times.

            One line per claim, finished build and take-back goes to stderr
            (--quiet: only take-backs, builds it stopped and problems).

            The database: --db, else $OPSH_DB (what the systemd units in
            contrib/systemd give from an environment file, keeping a password
            out of `ps`). Each runner records itself there: `opsh runners`
            lists them. Under a systemd Type=notify unit it says READY=1 once
            registered, WATCHDOG=1 after each heartbeat the database took (none
            after one it did not) and STOPPING=1 on SIGTERM.

            SIGTERM (or SIGHUP): claim no more builds, let the running ones
            finish, then exit 0. A second SIGTERM, or SIGINT, cancels them
            (status cancelled, with a log line) and exits 143 (130 for SIGINT).
            Exit status 2: a bad option or an unknown --scheme; 3: the
            database is unavailable or lacks migration 004_runners.
            """,
        options: CommonOptions.specs.filter { ["db", "busy-timeout", "quiet"].contains($0.name) }
            + [concurrencyOption, heartbeatOption, schemeOption, maxAttemptsOption, workspacesOption, keepWorkspacesOption])

    var options = CommonOptions()
    var concurrency: Int?
    var heartbeat: Double = 10
    var schemes: [String] = []
    var maxAttempts = 3
    var workspaces: String?
    var keepWorkspaces = 5

    /// Parses the words after `opsh runner`; nil for `--help`.
    init?(parsing words: ArraySlice<String>) throws {
        var scanner = ArgumentScanner(words, options: Self.help.options, command: Self.help)
        while let item = try scanner.next() {
            switch item {
            case .help:
                return nil
            case let .option(spec, value):
                let value = value ?? ""
                switch spec.name {
                case Self.concurrencyOption.name:
                    guard let count = Int(value), count > 0 else {
                        throw UsageError("'\(value)' is not a positive whole number for '--concurrency'", command: Self.help)
                    }
                    concurrency = count
                case Self.heartbeatOption.name:
                    guard let seconds = Double(value), seconds.isFinite, seconds >= 0.05 else {
                        throw UsageError("'\(value)' is not a number of seconds (0.05 or more) for '--heartbeat'", command: Self.help)
                    }
                    heartbeat = seconds
                case Self.schemeOption.name:
                    guard !value.isEmpty else { throw UsageError("--scheme needs a scheme id or name; it was given an empty one", command: Self.help) }
                    schemes.append(value)
                case Self.maxAttemptsOption.name:
                    guard let count = Int(value), count > 0 else {
                        throw UsageError("'\(value)' is not a positive whole number for '--max-attempts'", command: Self.help)
                    }
                    maxAttempts = count
                case Self.keepWorkspacesOption.name:
                    guard let count = Int(value), count >= 0 else {
                        throw UsageError("'\(value)' is not a whole number (0 or more) for '--keep-workspaces'", command: Self.help)
                    }
                    keepWorkspaces = count
                case Self.workspacesOption.name:
                    guard !value.isEmpty else { throw UsageError("--workspaces needs a folder; it was given an empty one", command: Self.help) }
                    workspaces = value
                default:
                    _ = try options.apply(spec, value: value, command: Self.help)
                }
            case let .operand(word):
                throw UsageError("unexpected argument '\(word)'", command: Self.help)
            }
        }
        try options.validate(command: Self.help)
    }

    func run() throws -> Int32 {
        try RunnerMode(command: self).run()
    }
}
