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

    /// Runs the script and ends the run as its mode says — committed or
    /// rolled back, the summary, the audit row — whether it returned,
    /// called `os.exit`, or failed; returns the exit status (`main` exits).
    func run() throws -> Int32 {
        let launch = Launch(options: options)
        let console = launch.console
        let startedAt = Date().timeIntervalSince1970
        let reason = options.givenReason
        if reason == nil && CommonOptions.environmentRequiresReason {
            throw Stop(.usage, "a reason is required (OPSH_REQUIRE_REASON=1): run again with --reason TEXT (or OPSH_REASON) saying why")
        }

        // The lock before anything else: the second run must not even
        // open the database.
        var heldLock: ScriptLock?
        if lock, case let .file(path) = source {
            do {
                heldLock = try ScriptLock.acquire(script: path, database: DatabaseLocation.resolve(explicitPath: options.db))
            } catch let failure as ScriptLock.Failure {
                if case .held = failure { throw Stop(.lockHeld, "\(path): \(failure)") }
                if case .databaseUnavailable = failure { throw Stop(.databaseUnavailable, "\(failure)") }
                throw Stop(.scriptError, "\(failure)")
            } catch {
                throw Stop(.scriptError, "\(error)")
            }
        }
        defer { withExtendedLifetime(heldLock) {} }

        let code: String
        let chunkName: String
        var script: String?
        switch source {
        case let .code(text):
            code = text
            chunkName = "=(command line)"
        case let .file(path):
            do {
                code = try ChunkRunner.readScript(path)
            } catch {
                throw Stop(.usage, "\(error)")
            }
            chunkName = "@\(path)"
            script = path
        case .standardInput:
            code = ChunkRunner.readStandardInput()
            chunkName = "=stdin"
            script = "-"
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
            throw Stop(.usage, "\(chunkName.dropFirst()): \(error)")
        }

        let session = try launch.openSession(interactive: false, refuseWithoutReason: reason == nil)
        let database = session.databaseSession
        // What the run commits is counted from here on; a database this
        // run created is not a use worth a row, what the run commits is.
        database.startCountingCommits(exactly: false)
        recorder.connectedAtStart = database.createdAtOpening
        let trail = database.auditDestination(busyTimeout: options.busyTimeout)
        let (watcher, deadline, runner) = Self.prepare(session.runtime, script: script, arguments: scriptArguments,
                                                       options: options, console: console)
        let arguments = scriptArguments.map { LuaValue.string($0) }
        /// The script itself, to its end: the status it gave `os.exit`,
        /// or nil when it returned.
        func runChunk() throws -> Int32? {
            // `return db.query(…)` with --csv/--tsv: the rows go from the
            // statement to stdout (ReturnedRows); only while the chunk runs.
            session.writeReturnedRows(as: options.outputMode.returnedRowsFormat)
            defer { session.writeReturnedRows(as: nil) }
            // Results to a file or a pipe: past 2 s, the rows read so far.
            let progress = options.outputMode != .table && !Terminal.isTerminal(1) ? RowsBuiltProgress() : nil
            defer { progress?.stop() }
            return try runner.run(code, chunkName: chunkName, arguments: arguments)
        }
        /// The script, then the callbacks its events still queue (a
        /// watch's): inside the run's dry run or `--max-changes`
        /// transaction, before `--timeout` is let go and before the audit
        /// row counts the run's changes. Run after them, a callback's write
        /// landed despite `--dry-run`, past the cap, without a deadline
        /// and missing from the audit row (scripts/reliability-attacks.md, 27u).
        /// A callback's `os.exit(n)` ends the run as the script's own does
        /// (committed by the mode's rule, status n), not as an error that
        /// rolled the run back (28a).
        func runScript() throws -> Int32? {
            let status = try runChunk()
            do {
                try deliverRemainingEvents(session, console: console)
            } catch let error as LuaError where error.exitStatus != nil {
                return error.exitStatus
            }
            return status
        }
        defer { database.close() }
        do {
            var exitStatus: Int32?
            var changes: TableChanges
            if options.dryRun {
                let (status, summary) = try database.dryRun(runScript)
                deadline?.cancel()
                exitStatus = status
                changes = summary.tables
                console.raw(Self.describe(summary))
                if let limit = options.maxChanges {
                    try TooManyChanges.check(summary, limit: limit, allowSchemaChanges: options.allowSchemaChanges, what: "the dry run")
                }
            } else if let limit = options.maxChanges {
                // The whole run one transaction, rolled back past the limit.
                (exitStatus, _) = try database.scope(.run, records: false, changeLimit: limit, gate: nil, runScript)
                deadline?.cancel()
                changes = database.committedChanges
            } else {
                exitStatus = try runScript()
                deadline?.cancel()
                changes = database.committedChanges
            }
            // The run went to a file that is gone from its path: its writes
            // are lost, which the caller (cron) must learn.
            if let problem = database.writeProblem { throw Stop(.databaseUnavailable, problem) }
            var status = exitStatus ?? ExitStatus.success.rawValue
            // What print left unwritten (a full disk under `> out.txt`):
            // the run failed, and its row says so. Its writes stay committed.
            if Terminal.reportStandardOutputFailure(on: console), status == ExitStatus.success.rawValue {
                status = ExitStatus.scriptError.rawValue
            }
            recorder.record(to: trail, startedAt: startedAt, status: status, dryRun: options.dryRun, changes: changes)
            Launch.pendingMigrationsNote(database).map(console.warning)
            return status
        } catch let stop as Stop {
            throw stop
        } catch {
            deadline?.cancel()
            let message = (error as? LuaError)?.message ?? "\(error)"
            var status = Self.status(for: error, signal: watcher.received, databaseFailure: database.connectionFailure)
            // A script stopped by a write refused because the file is gone:
            // the database, not the script, is the problem.
            if status == .scriptError, database.writeProblem != nil { status = .databaseUnavailable }
            // The database asks for a reason this run did not give.
            if database.connectionFailure == ReasonRequired.message || message.contains(ReasonRequired.message) { status = .usage }
            Self.report(error, status: status, console: console, dryRun: options.dryRun)
            for hint in database.hints(for: message) { console.error(hint) }
            // A failed run: what it committed before failing (a dry run:
            // nothing).
            recorder.record(to: trail, startedAt: startedAt, status: status.rawValue, dryRun: options.dryRun,
                            changes: options.dryRun ? [:] : database.committedChanges)
            Launch.pendingMigrationsNote(database).map(console.warning)
            return status.rawValue
        }
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
        let runner = ChunkRunner(runtime: runtime, printer: ValuePrinter(mode: options.outputMode, unicode: unicode))
        return (watcher, deadline, runner)
    }

    private func deliverRemainingEvents(_ session: any LuaSession, console: Console) throws {
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
        case .interrupted:
            if let note = (error as? LuaError)?.note { console.error("interrupted: \(note)") }
            console.error("interrupted; \(rolledBack)")
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
