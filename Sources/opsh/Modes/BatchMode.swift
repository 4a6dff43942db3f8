import Bindings
import Foundation
import LuaRuntime
import Shell
import Store

/// `opsh run FILE`, `opsh run -`, `opsh -e CODE`: one chunk, then exit
/// with a status that says how it went.
struct BatchMode {
    enum Source {
        case code(String)
        case file(String)
        case standardInput
    }

    let options: CommonOptions
    let source: Source
    let scriptArguments: [String]
    let lock: Bool

    func run() -> Never {
        let launch = Launch(options: options)
        let console = launch.console
        let startedAt = Date().timeIntervalSince1970
        let reason = options.givenReason
        if reason == nil && CommonOptions.environmentRequiresReason {
            launch.fail(.usage, "a reason is required (OPSH_REQUIRE_REASON=1): run again with --reason TEXT (or OPSH_REASON) saying why")
        }

        // The lock before anything else: the second run must not even
        // open the database.
        var heldLock: ScriptLock?
        if lock, case let .file(path) = source {
            do {
                heldLock = try ScriptLock.acquire(path: ScriptLock.path(
                    forScript: path, database: DatabaseLocation.resolve(explicitPath: options.db),
                    in: DatabaseLocation.runtimeDirectory()))
            } catch let failure as ScriptLock.Failure {
                if case .held = failure { launch.fail(.lockHeld, "\(path): \(failure)") }
                launch.fail(.scriptError, "\(failure)")
            } catch {
                launch.fail(.scriptError, "\(error)")
            }
        }

        let code: String
        let chunkName: String
        switch source {
        case let .code(text):
            code = text
            chunkName = "=(command line)"
        case let .file(path):
            do {
                code = try ChunkRunner.readScript(path)
            } catch {
                launch.fail(.usage, "\(error)")
            }
            chunkName = "@\(path)"
        case .standardInput:
            code = ChunkRunner.readStandardInput()
            chunkName = "=stdin"
        }

        // The audit trail's row, written when the run ends.
        let recorder = AuditRecorder(console: console, mode: { if case .code = source { return .eval } else { return .run } }(),
                                     options: options, reason: reason)
        switch source {
        case let .code(text):
            recorder.code = text
            LockOwner.configure(script: "-e")
        case let .file(path):
            recorder.describeScript(path: path, code: code)
            LockOwner.configure(script: recorder.script ?? path)
        case .standardInput:
            recorder.describeScript(path: "-", code: code)
            LockOwner.configure(script: "- (stdin)")
        }
        do {
            _ = try ScriptSchedule.period(in: code)
        } catch {
            launch.fail(.usage, "\(chunkName.dropFirst()): \(error)")
        }

        if let url = PostgresBatchMode.url(options) {
            var script: String?
            if case let .file(path) = source { script = path }
            if case .standardInput = source { script = "-" }
            PostgresBatchMode(options: options, url: url)
                .run(code: code, chunkName: chunkName, script: script, arguments: scriptArguments,
                     recorder: recorder, startedAt: startedAt, reason: reason)
        }
        let session = launch.openSession(interactive: false, requireReasonFromDatabase: reason == nil)
        // Connected already: a database this run created. Creating it is
        // not a use worth a row; what the run then commits is.
        recorder.connectedAtStart = session.store.isConnected
        var script: String?
        if case let .file(path) = source { script = path }
        if case .standardInput = source { script = "-" }
        let (watcher, deadline, runner) = Self.prepare(session.runtime, script: script, arguments: scriptArguments,
                                                       options: options, console: console)
        let arguments = scriptArguments.map { LuaValue.string($0) }
        var dryRunChanges: TableChanges = [:]
        do {
            if options.dryRun {
                let (_, summary) = try session.database.dryRun {
                    try runner.run(code, chunkName: chunkName, arguments: arguments)
                }
                deadline?.cancel()
                dryRunChanges = summary.tables
                console.raw(Self.describe(summary))
                if let limit = options.maxChanges {
                    try TooManyChanges.check(summary, limit: limit, allowSchemaChanges: options.allowSchemaChanges, what: "the dry run")
                }
            } else if let limit = options.maxChanges {
                // The whole run one transaction, rolled back past the limit.
                _ = try session.database.scope(.run, changeLimit: limit) {
                    try runner.run(code, chunkName: chunkName, arguments: arguments)
                }
                deadline?.cancel()
            } else {
                try runner.run(code, chunkName: chunkName, arguments: arguments)
                deadline?.cancel()
            }
            try deliverRemainingEvents(session, console: console)
            // The run went to a file that is gone from its path: its writes
            // are lost, which the caller (cron) must learn.
            if let problem = session.store.replacedFileProblem {
                launch.fail(.databaseUnavailable, problem)
            }
            recorder.record(to: SQLiteAuditDestination(store: session.store), startedAt: startedAt, status: ExitStatus.success.rawValue,
                            dryRun: options.dryRun, changes: options.dryRun ? dryRunChanges : session.store.committedChanges.committed)
        } catch {
            deadline?.cancel()
            var status = Self.status(for: error, signal: watcher.received,
                                     databaseFailure: session.store.connectionFailure)
            // A script stopped by a write refused because the file is gone:
            // the database, not the script, is the problem.
            if status == .scriptError, session.store.replacedFileProblem != nil { status = .databaseUnavailable }
            // The database asks for a reason this run did not give.
            if session.store.connectionFailure == ReasonRequired.message { status = .usage }
            Self.report(error, status: status, console: console, dryRun: options.dryRun)
            session.store.missingMigrationHint(for: (error as? LuaError)?.message ?? "\(error)").map(console.error)
            if status == .databaseUnavailable, "\(error)".contains("database is locked"),
               let path = session.store.path, let holders = LockHolders.sentence(for: path) {
                console.error("the database's lock is \(holders)")
            }
            // A failed run: what it committed before failing (a dry run:
            // nothing).
            recorder.record(to: SQLiteAuditDestination(store: session.store), startedAt: startedAt, status: status.rawValue, dryRun: options.dryRun,
                            changes: options.dryRun ? [:] : session.store.committedChanges.committed)
            Launch.pendingMigrationsNote(session.store).map(console.warning)
            Launch.checkpointAtExit(session)
            // Held to here: a closure that never returns (exit) would not
            // extend the lock's life in an optimized build.
            withExtendedLifetime(heldLock) {}
            exit(status.rawValue)
        }
        Launch.pendingMigrationsNote(session.store).map(console.warning)
        Launch.checkpointAtExit(session)
        withExtendedLifetime(heldLock) {}
        exit(ExitStatus.success.rawValue)
    }

    /// Events posted while the chunk ran (job log lines, say).
    /// What every batch run sets up in its runtime, whatever the engine:
    /// `require`'s folders next to the script (lua/ next to it, then next
    /// to it, then LUA_PATH's), `arg`, the printer, and what ends the
    /// process at once when a signal or the deadline comes while no chunk
    /// runs (opening, rolling back: the engine keeps the data whole).
    static func prepare(_ runtime: LuaRuntime, script: String?, arguments: [String], options: CommonOptions,
                        console: Console) -> (SignalWatcher, Deadline?, ChunkRunner) {
        if let script, script != "-" {
            let folder = URL(fileURLWithPath: script).deletingLastPathComponent().path
            runtime.prependModulePath(folder)
            runtime.prependModulePath(folder + "/lua")
        }
        Launch.setArguments(runtime, script: script, arguments: arguments)
        let watcher = SignalWatcher(runtime: runtime) { signal in
            console.error("stopped by signal \(signal)")
            _exit(128 + signal)
        }
        let deadline = options.timeout.map { seconds in
            Deadline(seconds: seconds, runtime: runtime) {
                console.error("timed out after \(seconds) s")
                _exit(ExitStatus.timeout.rawValue)
            }
        }
        let unicode = Terminal.isTerminal(1) && Terminal.isUTF8
        let runner = ChunkRunner(runtime: runtime, printer: ValuePrinter(mode: options.json ? .json : .table, unicode: unicode))
        return (watcher, deadline, runner)
    }

    private func deliverRemainingEvents(_ session: OpshSession, console: Console) throws {
        for error in try session.deliverEvents() {
            console.error(error.message)
        }
        fflush(nil)
    }

    /// - parameter databaseFailure: why the store could not connect, if it
    ///   tried and failed: it connects on first use, so a script's error
    ///   may be the database's refusal (a newer schema, damage).
    static func status(for error: any Error, signal: Int32, databaseFailure: String? = nil) -> ExitStatus {
        if let error = error as? LuaError {
            switch error.kind {
            case .interrupted(.timeout): return .timeout
            case .interrupted(.interrupted): return .interrupted
            case .interrupted(.terminated): return signal == SIGHUP ? .hangup : .terminated
            default:
                if let databaseFailure, error.message.contains(databaseFailure) { return .databaseUnavailable }
                return isDatabaseUnavailable(error.message) ? .databaseUnavailable : .scriptError
            }
        }
        if error is StoreError { return .databaseUnavailable }
        let text = "\(error)"
        return isDatabaseUnavailable(text) ? .databaseUnavailable : .scriptError
    }

    /// SQLITE_BUSY / SQLITE_LOCKED past the busy timeout, a read-only or
    /// vanished file, a full disk: the database, not the script, is the problem.
    static func isDatabaseUnavailable(_ message: String) -> Bool {
        let lowered = message.lowercased()
        // SQLITE_FULL (ENOSPC) was exit 1 while EFBIG's "disk I/O error" was 3:
        // both mean the database cannot take the write.
        return lowered.contains("database is locked") || lowered.contains("database table is locked")
            || lowered.contains("database or disk is full")
            || lowered.contains("database is busy") || lowered.contains("unable to open database")
            || lowered.contains("disk i/o error") || lowered.contains("database disk image is malformed")
    }

    static func report(_ error: any Error, status: ExitStatus, console: Console, dryRun: Bool) {
        let rolledBack = dryRun ? "the dry run's transaction was rolled back" : "any open transaction was rolled back"
        switch status {
        case .timeout: console.error("timed out; \(rolledBack)")
        case .interrupted: console.error("interrupted; \(rolledBack)")
        case .terminated, .hangup: console.error("terminated; \(rolledBack)")
        default:
            if let error = error as? LuaError {
                console.error(error.message + fileSizeLimitHint(error.message))
                if let traceback = error.traceback { console.raw(traceback) }
            } else {
                console.error("\(error)" + fileSizeLimitHint("\(error)"))
            }
        }
    }

    /// SQLite reports a write past `ulimit -f` (EFBIG) as a bare "disk I/O
    /// error": when opsh runs under such a limit, say so.
    static func fileSizeLimitHint(_ message: String) -> String {
        guard message.contains("disk I/O error") else { return "" }
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return "" }
        return " (the database file could not grow: opsh runs under a file-size limit of \(limit.rlim_cur) bytes, ulimit -f)"
    }

    static func describe(_ summary: ChangeSummary) -> String {
        guard !summary.isEmpty else { return "opsh: dry run: rolled back; no rows would have changed" }
        return (["opsh: dry run: rolled back; it would have changed:"] + summary.tableLines).joined(separator: "\n")
    }
}
