import Bindings
import Foundation
import Shell
import Store

/// `opsh` on a terminal: the interactive shell, the same on every engine.
/// Each chunk typed at the prompt is one transaction (README, "A chunk is a
/// transaction"); one that committed changes leaves its row in the audit
/// trail (not under `--dry-run` or `--read-only`).
struct ShellMode {
    let options: CommonOptions

    func run() throws -> Int32 {
        // --dry-run on an SQLite file small enough to copy: the session
        // works on a private copy (DryRunCopy).
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
                throw Stop(.databaseUnavailable, "\(error)")
            }
        }
        defer { copy?.remove() }
        let launch = Launch(options: sessionOptions)
        let console = launch.console
        let session = try launch.openSession(interactive: true)
        let database = session.databaseSession
        defer { if copy == nil { database.close() } }
        Launch.setArguments(session.runtime, script: nil, arguments: [])
        // A write that waits for a lock says so after a second, naming the holder.
        database.announceLockWaits(after: 1) { console.note($0) }
        LockOwner.configure(script: "shell")
        let reason = try Self.reason(options: options, console: console) {
            (try? database.requiresReason()) ?? false
        }
        var configuration = REPL.Configuration(
            historyPath: DatabaseLocation.stateDirectory() + "/history",
            initPath: options.noInit ? nil : DatabaseLocation.configDirectory() + "/init.lua")
        configuration.console = console
        configuration.mode = options.outputMode
        let label = PromptLabel(
            database: copy.map { ($0.source as NSString).lastPathComponent } ?? database.shortName,
            environment: EnvironmentVariables.process["OPSH_ENV"],
            modes: [options.readOnly ? "read-only" : nil, options.dryRun ? "dry-run" : nil,
                    options.sandbox ? "sandbox" : nil].compactMap { $0 },
            colour: Terminal.wantsColour(descriptor: 1))
        configuration.prompt = label.prompt
        // The dry run: on the private copy every chunk commits into the copy
        // (each sees the earlier ones' changes, undo() works), and it is
        // thrown away; where one transaction may span the session, the
        // session is that transaction; else each chunk re-applies the
        // session's earlier changes and is rolled back.
        let spansSession = options.dryRun && copy == nil && database.dryRunSpansTheSession
        configuration.dryRunCopy = copy != nil
        configuration.dryRunReplay = options.dryRun && copy == nil && !spansSession
        if configuration.dryRunCopy || configuration.dryRunReplay { database.markAsDryRun() }
        configuration.maxChanges = options.maxChanges
        if !options.quiet {
            let server = database.serverDescription.map { " (\($0))" } ?? ""
            var banner = "\(label.sentence) — \(copy?.source ?? database.label)\(server)\(options.dryRun ? "; a dry run: nothing is kept" : "") — Lua 5.4; .help for help, Ctrl-D to leave"
            if copy != nil {
                banner += "\nthe dry run works on a private copy taken now: the database is not locked meanwhile, and what the backend writes from now on is not seen here"
            }
            if let copyNote { banner += "\n" + copyNote }
            if database.undoUnavailable != nil {
                banner += "\neach chunk is one transaction; undo() is not available on \(database.engine.name) (--dry-run tries changes)"
            }
            if let pending = Launch.pendingMigrationsNote(database) { banner += "\n" + pending }
            configuration.banner = banner
        }
        // The audit trail: a row per chunk that committed changes (not in a
        // dry run, whose chunks land in a copy or are rolled back).
        if !options.dryRun && !options.readOnly {
            database.startCountingCommits(exactly: true)
            let recorder = AuditRecorder(console: console, mode: .shell, options: options, reason: reason)
            let trail = database.auditDestination(busyTimeout: options.busyTimeout)
            var before: TableChanges = [:]
            configuration.beforeChunk = { code in
                before = database.committedChanges
                recorder.chunkBegins(code: code)
            }
            // The chunk's row in its own transaction (AuditRecorder.writeInChunk).
            database.beforeChunkCommit = { commit in
                recorder.writeInChunk(changes: commit.changes, on: commit.connection, savepoint: commit.savepoint)
            }
            configuration.afterChunk = { code, startedAt, failed in
                // (SQLite's tally sees the chunk's own row commit with it;
                // PostgreSQL's counts leave it out.)
                let changes = recorder.withoutOwnRow(database.committedChanges.since(before))
                recorder.chunkEnded(code: code, startedAt: startedAt, failed: failed, changes: changes, destination: trail)
            }
        }
        let repl = REPL(session: session, configuration: configuration)
        let status: Int32
        if spansSession {
            do {
                let (result, summary) = try database.dryRun { repl.run() }
                status = result
                console.raw(BatchMode.describe(summary))
            } catch {
                throw Stop(.databaseUnavailable, "\(error)")
            }
        } else {
            status = repl.run()
            if options.dryRun { console.raw(BatchMode.describe(repl.chunks.total)) }
        }
        return status
    }

    /// The session's reason: `--reason` or `OPSH_REASON`; else, when
    /// `OPSH_REQUIRE_REASON=1` or the database asks for one, asked for at
    /// the terminal. The shell does not start without one.
    static func reason(options: CommonOptions, console: Console, requiredByDatabase: () -> Bool) throws -> String? {
        if let given = options.givenReason { return given }
        let fromDatabase = requiredByDatabase()
        guard CommonOptions.environmentRequiresReason || fromDatabase else { return nil }
        let why = fromDatabase ? "this database requires a reason (audit.requireReason)" : "OPSH_REQUIRE_REASON=1"
        print("\(why): why are you here? (recorded in the audit trail) ", terminator: "")
        fflush(nil)
        let answer = readLine()?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        if answer.isEmpty {
            throw Stop(.usage, "no reason given: the shell does not start without one (\(why)); give one, or --reason TEXT")
        }
        return answer
    }
}
