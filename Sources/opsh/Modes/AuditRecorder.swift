import Bindings
import Foundation
import Shell
import Store

/// Writes the audit trail's rows (README, "The audit trail"): one per
/// `opsh run` and `-e` that used the database, one per shell chunk that
/// committed changes. Each row is written after the work's transaction
/// ended, in a short transaction of its own, so a rollback does not take
/// it along. `--read-only` runs write nothing and are not recorded. The
/// same on both engines: where the row goes is an ``AuditDestination``.
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
        scriptSHA256 = SHA256.hex(Array(code.utf8))
        period = try? ScriptSchedule.period(in: code)
    }

    /// Records one run or chunk. Nothing when the database was never
    /// used, or opened read-only. Problems are said on stderr; they never
    /// change the run's exit status.
    func record(to destination: some AuditDestination, startedAt: Double, status: Int32, dryRun: Bool,
                changes: TableChanges) {
        guard !readOnly, destination.wasUsed else { return }
        if connectedAtStart && changes.isEmpty && !dryRun && mode != .shell { return }
        do {
            guard try destination.hasTrail() else {
                if !saidNotMigrated {
                    saidNotMigrated = true
                    console.warning("the audit trail is not recorded on this database until `opsh migrate` applies \(AuditTrail.migration)")
                }
                return
            }
            let entry = AuditEntry(startedAt: startedAt, endedAt: Date().timeIntervalSince1970, mode: mode,
                                   script: script, scriptSHA256: scriptSHA256, code: nil, reason: reason,
                                   dryRun: dryRun, readOnly: readOnly, changes: changes, status: status, period: period)
            // A run that changed nothing (a read, a dry run) must not wait
            // behind the backend's writers for the whole lock wait just to
            // leave its row (README, "How opsh behaves beside a live backend").
            let briefly = changes.isEmpty && mode != .shell
            do {
                try destination.write(entry, code: code, waitingAtMost: briefly ? Self.readOnlyRunWait : nil)
            } catch {
                if briefly && destination.isLockTimeout(error) {
                    console.warning("the audit trail could not record this run: another process holds the lock it needs (a run that changed nothing waits at most \(Self.readOnlyRunWait) s for it, so that reading never stalls behind the backend)")
                    return
                }
                throw error
            }
        } catch {
            console.error("the audit trail could not record this \(mode == .shell ? "chunk" : "run"): \(error)")
        }
    }

    /// Seconds the audit row of a run that committed nothing waits for the
    /// write lock.
    static let readOnlyRunWait = 0.2
}
