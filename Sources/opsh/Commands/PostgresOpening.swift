import Store

/// How every mode opens a PostgreSQL database from the command line: the
/// session's options (`--busy-timeout` is its lock timeout, `--timeout`
/// covers connecting), and the exit status a failure to open ends with
/// (issue 24, items 22 to 25).
enum PostgresOpening {
    static func options(_ options: CommonOptions) -> PostgresDatabase.Options {
        PostgresDatabase.Options(readOnly: options.readOnly, create: options.create,
                                 lockTimeout: options.busyTimeout, connectTimeLimit: options.timeout)
    }

    /// Opens the database a script or the shell runs on, or ends the
    /// process saying why (``status(of:)``). Under `--read-only` or
    /// `--dry-run` a database whose extensions write through connections
    /// of their own (dblink) is refused before anything runs: neither
    /// holds such writes back.
    static func open(_ url: String, _ options: CommonOptions, launch: Launch) -> PostgresDatabase {
        do {
            let database = try PostgresDatabase(url: url, options: Self.options(options))
            if options.readOnly || options.dryRun {
                try database.refuseExtensionsThatConnectOnTheirOwn(for: options.readOnly ? "--read-only" : "--dry-run")
            }
            return database
        } catch {
            launch.fail(status(of: error), "\(error)")
        }
    }

    /// A malformed URL is a usage error (2); `--timeout` running out while
    /// connecting is a timeout (124); anything else leaves the database
    /// unavailable (3).
    static func status(of error: any Error) -> ExitStatus {
        switch error as? PostgresStoreError {
        case .invalidURL?: .usage
        case .connectTimedOut?: .timeout
        default: .databaseUnavailable
        }
    }
}
