/// opsh's exit statuses: distinct for each way a cron run can end, so the
/// caller can tell a failed script from an unavailable database.
enum ExitStatus: Int32 {
    /// The run finished.
    case success = 0
    /// The script raised an error (or does not compile); message with
    /// `file:line` and a traceback on stderr.
    case scriptError = 1
    /// A bad command line: unknown option, missing or unreadable script.
    case usage = 2
    /// The database cannot be opened, is not a database, is damaged or
    /// newer, stayed locked past the busy timeout, or the disk is full.
    case databaseUnavailable = 3
    /// Another run of the same script holds its lock (EX_TEMPFAIL: try
    /// again later).
    case lockHeld = 75
    /// `--timeout` passed.
    case timeout = 124
    /// SIGHUP.
    case hangup = 129
    /// SIGINT (Ctrl-C).
    case interrupted = 130
    /// SIGTERM.
    case terminated = 143

    static let summary = """
        Exit status:
          0    success
          1    the script raised an error (file:line and traceback on stderr)
          2    usage error (bad option, missing or unreadable script file)
          3    database unavailable (cannot open, not a database, damaged, newer
               schema, locked past --busy-timeout, or the disk is full)
          75   another run of the same script holds its lock (opsh run --lock)
          124  --timeout passed
          130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM; 129 by SIGHUP
        On every non-zero status an open transaction has been rolled back.
        """
}
