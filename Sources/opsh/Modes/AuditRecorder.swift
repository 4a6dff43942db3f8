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
        scriptSHA256 = AuditTrail.digest(code)
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

/// Where an ``AuditRecorder`` writes: the engine's side of the trail.
protocol AuditDestination {
    /// Whether the run used the database at all (a one-liner that never
    /// touched it is not recorded).
    var wasUsed: Bool { get }
    /// Whether the database has the trail (migration 003).
    func hasTrail() throws -> Bool
    /// Writes the row in a short transaction of its own, `code` masked
    /// with the secrets the database holds; `waitingAtMost`: seconds it
    /// may wait for a lock (nil: as long as any write).
    func write(_ entry: AuditEntry, code: String?, waitingAtMost: Double?) throws
    /// Whether `error` is a lock wait that ran out.
    func isLockTimeout(_ error: any Error) -> Bool
}

extension AuditDestination {
    static func entry(_ entry: AuditEntry, code: String?, in db: some RepositoryConnection) -> AuditEntry {
        var masked = entry
        if let code { masked.code = CodeMask.mask(code, knownSecrets: AuditTrail.knownSecrets(db)) }
        return masked
    }
}

/// An SQLite file: the store's writer, its lock wait.
struct SQLiteAuditDestination: AuditDestination {
    let store: Store

    var wasUsed: Bool { store.isConnected && store.path != nil }

    func hasTrail() throws -> Bool {
        try store.read { try AuditTrail.exists($0) }
    }

    func write(_ entry: AuditEntry, code: String?, waitingAtMost seconds: Double?) throws {
        let write = {
            try store.write { db in try AuditTrail.insert(Self.entry(entry, code: code, in: db), db) }
        }
        if let seconds { try store.lockWait.capped(at: seconds, write) } else { try write() }
    }

    func isLockTimeout(_ error: any Error) -> Bool {
        "\(error)".contains("database is locked")
    }
}

/// A PostgreSQL database: the session's connection, once no transaction
/// of the run's is open; the row itself is not counted among the run's
/// changes.
struct PostgresAuditDestination: AuditDestination {
    let database: PostgresDatabase
    /// Statements run before the script began (opsh's own).
    let statementsBefore: Int
    /// Seconds the row of a run that changed data waits for a lock on the
    /// trail (`--busy-timeout`, as SQLite's writer waits).
    let lockWait: Double

    var wasUsed: Bool { database.statementCount > statementsBefore }

    func hasTrail() throws -> Bool {
        try AuditTrail.exists(database)
    }

    func write(_ entry: AuditEntry, code: String?, waitingAtMost seconds: Double?) throws {
        let counting = database.countsCommits
        database.countsCommits = false
        defer { database.countsCommits = counting }
        try database.transaction {
            // The server's lock wait, for this transaction only.
            let wait = seconds ?? lockWait
            _ = try database.execute("SELECT set_config('lock_timeout', ?, true)", .positional([.text("\(max(Int(wait * 1000), 1))ms")]))
            try AuditTrail.insert(Self.entry(entry, code: code, in: database), database)
        }
    }

    func isLockTimeout(_ error: any Error) -> Bool {
        PostgresDatabase.isLockTimeout(error)
    }
}
