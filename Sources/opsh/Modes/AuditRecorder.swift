import Bindings
import Foundation
import Shell
import Store

/// Writes the audit trail's rows (docs/operations.md, "The audit trail"): one per
/// `opsh run` and `-e` that used the database, one per shell chunk that
/// committed changes. A run's row is written after the run's transaction
/// ended (a rollback does not take it along), in a short transaction of
/// its own on the trail's own connection (``AuditConnection``, never the
/// script's); a chunk's row in the chunk's own transaction, checked after
/// the commit through that connection (AuditRecorder+Chunks.swift).
/// `--read-only` runs write nothing and are not recorded. The same on both
/// engines: where the row goes is an ``AuditDestination``.
final class AuditRecorder {
    let console: Console
    let mode: AuditEntry.Mode
    let reason: String?
    let readOnly: Bool
    var script: String?
    var scriptSHA256: String?
    var code: String?
    var period: Double?
    /// The database was made when the run began (a database it created):
    /// then only a run that committed something, or a dry run, counts as
    /// having used it.
    var connectedAtStart = false
    private var saidNotMigrated = false

    init(console: Console, mode: AuditEntry.Mode, options: CommonOptions, reason: String?) {
        self.console = console
        self.mode = mode
        self.reason = reason
        self.readOnly = options.readOnly
    }

    /// A script's file: its absolute path (cron's and an operator's names
    /// of it agree), its SHA-256 and its declared period.
    func describeScript(path: String, code: String) {
        if path == "-" {
            script = "-"
            self.code = code
        } else {
            let absolute = URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
            script = absolute
        }
        scriptSHA256 = AuditTrail.digest(code)
        period = try? ScriptSchedule.period(in: code)
    }

    /// Records one run or chunk, through the trail's own connection
    /// (``AuditConnection``). Nothing when the database was never used
    /// (unless the script declares a period), or opened read-only. Problems are said on stderr; they never change
    /// the run's exit status. A row that cannot be written is spooled for
    /// the next run; a run that changed nothing says nothing when it only
    /// found the lock taken (a read beside the backend, which cron would
    /// mail every time).
    func record(to destination: some AuditDestination, startedAt: Double, status: Int32, dryRun: Bool,
                changes: TableChanges) {
        // A script with a period is always recorded, even one that never
        // touched the database: `opsh runs --overdue` judges it by its rows.
        let scheduled = period != nil && mode != .shell
        guard !readOnly, destination.wasUsed || scheduled else { return }
        if connectedAtStart && changes.isEmpty && !dryRun && mode != .shell && !scheduled { return }
        let trail = destination.trail
        do {
            guard try trail.hasTrail() else {
                sayNotMigrated()
                return
            }
        } catch {
            console.error("the audit trail could not record this \(what): \(error)")
            return
        }
        let entry = AuditEntry(startedAt: startedAt, endedAt: Date().timeIntervalSince1970, mode: mode,
                               script: script, scriptSHA256: scriptSHA256, code: nil, reason: reason,
                               dryRun: dryRun, readOnly: readOnly, changes: changes, status: status, period: period)
        // A run that changed nothing (a read, a dry run) must not wait
        // behind the backend's writers for the whole lock wait just to
        // leave its row (README, "How opsh behaves beside a live backend").
        let briefly = changes.isEmpty && mode != .shell
        switch trail.record(entry, code: code, waitingAtMost: briefly ? Self.readOnlyRunWait : nil) {
        case .written:
            break
        case let .spooled(file, error):
            if briefly && trail.isLockTimeout(error) { return }
            console.error("the audit trail could not record this \(what): \(error); the row is kept in \(file) for the next run on this database to write")
        case let .failed(error):
            console.error("the audit trail could not record this \(what): \(error)")
        }
    }

    var what: String { mode == .shell ? "chunk" : "run" }

    private func sayNotMigrated() {
        guard !saidNotMigrated else { return }
        saidNotMigrated = true
        console.warning("the audit trail is not recorded on this database until `opsh migrate` applies \(AuditTrail.migration)")
    }

    /// The shell chunk running now (AuditRecorder+Chunks.swift).
    var chunk: ChunkInProgress?

    /// Seconds the audit row of a run that committed nothing waits for the
    /// write lock.
    static let readOnlyRunWait = 0.2
}
