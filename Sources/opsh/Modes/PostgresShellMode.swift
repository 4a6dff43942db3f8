import Bindings
import Foundation
import Shell
import Store

/// `opsh` on a terminal with a PostgreSQL database: the same REPL as on
/// SQLite (editing, history, completion, dot commands, watch callbacks at
/// the prompt). Each chunk typed at the prompt is one transaction, with a
/// savepoint per statement (a failure caught with pcall does not doom it);
/// it commits when the chunk ends and says what it changed, and rolls back
/// when the chunk fails or is interrupted. `--dry-run` is the whole
/// session in one transaction, rolled back at the end. A chunk that
/// committed changes leaves its row in the audit trail, as on SQLite (not
/// under `--dry-run` or `--read-only`); the reason is asked for as there.
struct PostgresShellMode {
    let options: CommonOptions
    let url: String

    func run() -> Never {
        let launch = Launch(options: options)
        let console = launch.console
        if options.maxChanges != nil {
            launch.fail(.usage, "--max-changes is not available on PostgreSQL yet; use --dry-run to see what a chunk would change")
        }
        let database = PostgresOpening.open(url, options, launch: launch)
        let session: PostgresSession
        do {
            session = try PostgresSession(database: database, sandbox: options.sandbox,
                                          memoryLimit: options.memoryLimit.map { $0 << 20 })
        } catch {
            launch.fail(.databaseUnavailable, "\(error)")
        }
        Launch.setArguments(session.runtime, script: nil, arguments: [])
        let reason = ShellMode.reason(options: options, console: console) {
            (try? AuditTrail.requiresReason(database)) ?? false
        }
        var configuration = REPL.Configuration(
            historyPath: DatabaseLocation.stateDirectory() + "/history",
            initPath: options.noInit ? nil : DatabaseLocation.configDirectory() + "/init.lua")
        configuration.console = console
        configuration.mode = options.json ? .json : .table
        let label = PromptLabel(
            database: database.url.database,
            environment: ProcessInfo.processInfo.environment["OPSH_ENV"],
            modes: [options.readOnly ? "read-only" : nil, options.dryRun ? "dry-run" : nil,
                    options.sandbox ? "sandbox" : nil].compactMap { $0 },
            colour: Terminal.wantsColour(descriptor: 1))
        configuration.prompt = label.prompt
        if !options.quiet {
            var banner = "\(label.sentence) — \(database.label) (PostgreSQL \(database.serverVersion))"
                + "\(options.dryRun ? "; a dry run: nothing is kept" : "") — Lua 5.4; .help for help, Ctrl-D to leave"
            banner += "\neach chunk is one transaction; undo() is SQLite's only (--dry-run tries changes)"
            if !database.pendingMigrations.isEmpty {
                banner += "\nthis database lacks migrations \(database.pendingMigrations.joined(separator: ", "))"
            }
            configuration.banner = banner
        }
        // The audit trail: a row per chunk that committed changes (not in a
        // dry run, whose chunks are rolled back with the session).
        if !options.dryRun && !options.readOnly {
            database.countsCommits = true
            let recorder = AuditRecorder(console: console, mode: .shell, options: options, reason: reason)
            let trail = PostgresAuditDestination(database: database, statementsBefore: 0, lockWait: options.busyTimeout)
            var before: TableChanges = [:]
            configuration.beforeChunk = { before = database.committed }
            configuration.afterChunk = { code, startedAt, failed in
                let changes = database.committed.since(before)
                guard !changes.isEmpty else { return }
                recorder.code = code
                recorder.record(to: trail, startedAt: startedAt, status: failed ? 1 : 0, dryRun: false, changes: changes)
            }
        }
        let repl = REPL(session: session, configuration: configuration)
        repl.runChunkElsewhere = { body in
            let summary = try database.chunk(body)
            if !summary.isEmpty {
                console.note((options.dryRun ? "dry run: " : "committed: ") + summary.sentence)
            }
        }
        var status: Int32 = 0
        if options.dryRun {
            do {
                let (result, summary) = try database.dryRun { repl.run() }
                status = result
                console.raw(BatchMode.describe(summary))
            } catch {
                launch.fail(.databaseUnavailable, "\(error)")
            }
        } else {
            status = repl.run()
        }
        // The REPL holds the session; the session outlives the REPL's run.
        _ = try? session.deliverEvents()
        exit(status)
    }
}
