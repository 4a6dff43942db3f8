import Bindings
import Foundation
import Shell
import Store

/// `opsh` on a terminal: the interactive shell.
struct ShellMode {
    let options: CommonOptions

    func run() -> Never {
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
        let repl = REPL(session: session, configuration: configuration)
        var status: Int32 = 0
        if copy != nil || configuration.dryRunReplay {
            status = repl.run()
            launch.console.raw(BatchMode.describe(repl.chunks.total))
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
}
