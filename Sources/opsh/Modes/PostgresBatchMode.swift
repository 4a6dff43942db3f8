import Bindings
import Foundation
import LuaRuntime
import Shell
import Store

/// `opsh run` and `opsh -e` on a PostgreSQL database (`--db
/// postgresql://…` or `OPSH_DB`): the script's SQL runs on the server with
/// the SQLite mode's exit codes, `--dry-run` (one transaction rolled back,
/// with what it would have changed), `--read-only` (the server's
/// read-only transactions), `--timeout` and Ctrl-C (the running statement
/// cancelled on the server), and the audit trail's row, as on SQLite: the
/// rows each committed transaction changed, from the server's counters
/// (``PostgresDatabase/committed``), written after the run in a short
/// transaction of its own.
struct PostgresBatchMode {
    let options: CommonOptions
    let url: String

    /// Whether `--db` (else `OPSH_DB`) names a PostgreSQL database.
    static func url(_ options: CommonOptions) -> String? {
        let named = options.db ?? ProcessInfo.processInfo.environment["OPSH_DB"]
        guard let named, named.hasPrefix("postgresql://") || named.hasPrefix("postgres://") else { return nil }
        return named
    }

    func run(code: String, chunkName: String, script: String?, arguments scriptArguments: [String],
             recorder: AuditRecorder, startedAt: Double, reason: String?) -> Never {
        let launch = Launch(options: options)
        let console = launch.console
        if options.maxChanges != nil {
            launch.fail(.usage, "--max-changes is not available on PostgreSQL yet; use --dry-run to see what a script would change")
        }
        let database = PostgresOpening.open(url, options, launch: launch)
        // The database asks for a reason this run did not give: refused
        // before the script reads or writes anything, as on SQLite.
        if reason == nil, (try? AuditTrail.requiresReason(database)) == true {
            launch.fail(.usage, ReasonRequired.message)
        }
        let session: PostgresSession
        do {
            session = try PostgresSession(database: database, sandbox: options.sandbox,
                                          memoryLimit: options.memoryLimit.map { $0 << 20 })
        } catch {
            launch.fail(.databaseUnavailable, "cannot start a session on \(database.label): \(error)")
        }
        let (watcher, deadline, runner) = BatchMode.prepare(session.runtime, script: script, arguments: scriptArguments,
                                                            options: options, console: console)
        let arguments = scriptArguments.map { LuaValue.string($0) }
        // The audit trail: what the run commits is counted from here on
        // (a database this run created is not a use worth a row).
        database.countsCommits = !options.readOnly
        // A loop of small writes in db.transaction costs one round trip each, not two readings more.
        database.countsFailedStatementsExactly = false
        recorder.connectedAtStart = !database.appliedAtOpening.isEmpty
        let trail = PostgresAuditDestination(database: database, statementsBefore: database.statementCount,
                                             lockWait: options.busyTimeout)
        var dryRunChanges: TableChanges = [:]
        do {
            if options.dryRun {
                let (_, summary) = try database.dryRun {
                    try runner.run(code, chunkName: chunkName, arguments: arguments)
                }
                deadline?.cancel()
                dryRunChanges = summary.tables
                console.raw(BatchMode.describe(summary))
            } else {
                try runner.run(code, chunkName: chunkName, arguments: arguments)
                deadline?.cancel()
            }
            // Watch callbacks still queued run now, as on SQLite. (This use
            // also keeps the session alive while the chunk runs: its modules
            // hold it unowned, and an optimized build ends an object's life at
            // its last use.)
            for error in try session.deliverEvents() { console.error(error.message) }
            fflush(nil)
            recorder.record(to: trail, startedAt: startedAt, status: ExitStatus.success.rawValue, dryRun: options.dryRun,
                            changes: options.dryRun ? dryRunChanges : database.committed)
        } catch {
            deadline?.cancel()
            let status = BatchMode.status(for: error, signal: watcher.received)
            BatchMode.report(error, status: status, console: console, dryRun: options.dryRun)
            // A failed run: what it committed before failing (a dry run:
            // nothing).
            recorder.record(to: trail, startedAt: startedAt, status: status.rawValue, dryRun: options.dryRun,
                            changes: options.dryRun ? [:] : database.committed)
            exit(status.rawValue)
        }
        if !database.pendingMigrations.isEmpty {
            console.warning("this database lacks migrations \(database.pendingMigrations.joined(separator: ", ")): opsh does not apply them on its own")
        }
        exit(ExitStatus.success.rawValue)
    }
}
