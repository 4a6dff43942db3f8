import Bindings
import Foundation
import Shell
import Store

/// `opsh` on a terminal: the interactive shell.
struct ShellMode {
    let options: CommonOptions

    func run() -> Never {
        if let url = PostgresBatchMode.url(options) { PostgresShellMode(options: options, url: url).run() }
        // --dry-run: the session works on a private copy (DryRunCopy).
        var copy: DryRunCopy?
        var copyNote: String?
        var sessionOptions = options
        if options.dryRun {
            do {
                let made = try DryRunCopy.make(of: options)
                copy = made.copy
                copyNote = made.reason
                if let copy {
                    sessionOptions.db = copy.path
                    sessionOptions.create = false
                }
            } catch {
                Launch(options: options).fail(.databaseUnavailable, "\(error)")
            }
        }
        let launch = Launch(options: sessionOptions)
        let session = launch.openSession(interactive: true)
        Launch.setArguments(session.runtime, script: nil, arguments: [])
        LockOwner.configure(script: "shell")
        let store = session.store
        let reason = Self.reason(options: options, console: launch.console) {
            (try? store.read { try AuditTrail.requiresReason($0) }) ?? false
        }
        var configuration = REPL.Configuration(
            historyPath: DatabaseLocation.stateDirectory() + "/history",
            initPath: options.noInit ? nil : DatabaseLocation.configDirectory() + "/init.lua")
        configuration.console = launch.console
        configuration.mode = options.json ? .json : .table
        let path = copy?.source ?? session.store.path ?? ":memory:"
        let label = PromptLabel(
            database: (path as NSString).lastPathComponent,
            environment: ProcessInfo.processInfo.environment["OPSH_ENV"],
            modes: [options.readOnly ? "read-only" : nil, options.dryRun ? "dry-run" : nil,
                    options.sandbox ? "sandbox" : nil].compactMap { $0 },
            colour: Terminal.wantsColour(descriptor: 1))
        configuration.prompt = label.prompt
        // On the private copy every chunk commits into the copy (each sees
        // the earlier ones' changes, undo() works), and it is thrown away.
        configuration.dryRunCopy = copy != nil
        configuration.dryRunReplay = options.dryRun && copy == nil && session.store.path != nil
        if configuration.dryRunReplay { session.database.markedDryRun = true }
        configuration.maxChanges = options.maxChanges
        if copy != nil { session.database.markedDryRun = true }
        if !options.quiet {
            var banner = "\(label.sentence) — \(path)\(options.dryRun ? "; a dry run: nothing is kept" : "") — Lua 5.4; .help for help, Ctrl-D to leave"
            if copy != nil {
                banner += "\nthe dry run works on a private copy taken now: the database is not locked meanwhile, and what the backend writes from now on is not seen here"
            }
            if let copyNote { banner += "\n" + copyNote }
            if let pending = Launch.pendingMigrationsNote(session.store) { banner += "\n" + pending }
            configuration.banner = banner
        }
        // The audit trail: a row per chunk that committed changes (not in a
        // dry run, whose chunks land in a copy or are rolled back).
        if !options.dryRun {
            let recorder = AuditRecorder(console: launch.console, mode: .shell, options: options, reason: reason)
            let destination = SQLiteAuditDestination(store: store)
            var before: TableChanges = [:]
            configuration.beforeChunk = { code in
                before = store.committedChanges.committed
                recorder.chunkBegins(code: code)
            }
            // The chunk's row in its own transaction (AuditRecorder.writeInChunk).
            session.database.beforeChunkCommit = { summary, db in
                recorder.writeInChunk(changes: summary.tables, on: db) { try db.inSavepoint($0) }
            }
            configuration.afterChunk = { code, startedAt, failed in
                let changes = recorder.withoutOwnRow(store.committedChanges.committed.since(before))
                recorder.chunkEnded(code: code, startedAt: startedAt, failed: failed, changes: changes, destination: destination)
            }
        }
        let repl = REPL(session: session, configuration: configuration)
        var status: Int32 = 0
        if copy != nil || configuration.dryRunReplay {
            status = repl.run()
            launch.console.raw(BatchMode.describe(repl.chunks?.total ?? ChangeSummary()))
        } else if options.dryRun {
            do {
                let (result, summary) = try session.database.dryRun { repl.run() }
                status = result
                launch.console.raw(BatchMode.describe(summary))
            } catch {
                launch.fail(.databaseUnavailable, "\(error)")
            }
        } else {
            status = repl.run()
        }
        if copy == nil { Launch.checkpointAtExit(session) }
        copy?.remove()
        exit(status)
    }

    /// The session's reason: `--reason` or `OPSH_REASON`; else, when
    /// `OPSH_REQUIRE_REASON=1` or the database asks for one, asked for at
    /// the terminal. The shell does not start without one. The same on
    /// both engines: `requiredByDatabase` reads the database's setting.
    static func reason(options: CommonOptions, console: Console, requiredByDatabase: () -> Bool) -> String? {
        if let given = options.givenReason { return given }
        let fromDatabase = requiredByDatabase()
        guard CommonOptions.environmentRequiresReason || fromDatabase else { return nil }
        let why = fromDatabase ? "this database requires a reason (audit.requireReason)" : "OPSH_REQUIRE_REASON=1"
        print("\(why): why are you here? (recorded in the audit trail) ", terminator: "")
        fflush(nil)
        let answer = readLine()?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        if answer.isEmpty {
            console.error("no reason given: the shell does not start without one (\(why)); give one, or --reason TEXT")
            exit(ExitStatus.usage.rawValue)
        }
        return answer
    }
}
