import Bindings
import Foundation
import LuaRuntime
import Shell
import Store

/// A mode ending early: the status the process exits with and what to say
/// on stderr first. `main` is the one place the process exits
/// (docs/operations.md, "Exit status"): modes return their status or
/// throw this.
struct Stop: Error {
    let status: ExitStatus
    let message: String?

    init(_ status: ExitStatus, _ message: String? = nil) {
        self.status = status
        self.message = message
    }
}

/// What every mode does first: open the database and a session on it.
struct Launch {
    let options: CommonOptions
    let console: Console

    init(options: CommonOptions) {
        self.options = options
        console = Console(colour: Terminal.wantsColour(descriptor: 2), quiet: options.quiet)
    }

    /// How the options ask for the database to be opened.
    ///
    /// - parameter interactive: the shell connects before its first prompt
    ///   (a database opsh cannot use is refused at once). The batch modes
    ///   connect on first use, so a script that never touches the database
    ///   starts in a few milliseconds.
    /// - parameter refuseWithoutReason: refuse the database's first use
    ///   when it asks for a reason (``ReasonRequired``): a run without
    ///   `--reason` on such a database.
    func databaseOptions(interactive: Bool, refuseWithoutReason: Bool = false) -> Databases.Options {
        var database = Databases.Options(db: options.db)
        database.readOnly = options.readOnly
        database.create = options.create
        database.busyTimeout = options.busyTimeout
        // Only the default location is made without being asked: a
        // mistyped --db or OPSH_DB must not succeed on an empty database.
        database.createIfMissing = options.create || Databases.named(options.db) == nil
        database.connectNow = interactive
        database.refuseWithoutReason = refuseWithoutReason
        database.dryRun = options.dryRun
        database.connectTimeLimit = options.timeout
        database.sandbox = options.sandbox
        return database
    }

    /// A Lua session on the database the options name; ``Stop`` with
    /// status 3 when it cannot be used (2 when it asks for a reason the run
    /// did not give).
    func openSession(interactive: Bool, refuseWithoutReason: Bool = false) throws -> any LuaSession {
        var session = LuaSessions.Options(database: databaseOptions(interactive: interactive,
                                                                     refuseWithoutReason: refuseWithoutReason))
        session.sandbox = options.sandbox
        session.memoryLimit = options.memoryLimit.map { $0 << 20 }
        session.lazyModules = !interactive
        do {
            let opened = try LuaSessions.open(session)
            opened.databaseSession.allowsSchemaChanges = options.allowSchemaChanges
            // The session's own notes are the console's: --quiet drops them.
            let console = console
            opened.databaseSession.sayNotes { console.note($0) }
            return opened
        } catch {
            throw Self.stop(opening: error)
        }
    }

    /// How a failure to open the database ends the process: a malformed
    /// URL or a missing reason is a usage error (2), the time limit running
    /// out while connecting a timeout (124), anything else leaves the
    /// database unavailable (3).
    static func stop(opening error: any Error) -> Stop {
        switch Databases.failure(of: error) {
        case .usage: Stop(.usage, "\(error)")
        case .timeout: Stop(.timeout, "\(error)")
        case .unavailable: Stop(.databaseUnavailable, "\(error)")
        }
    }

    /// A sentence about migrations the database lacks, or nil.
    static func pendingMigrationsNote(_ database: any DatabaseSession) -> String? {
        let pending = database.pendingMigrations
        guard !pending.isEmpty else { return nil }
        return "this database lacks migrations \(pending.joined(separator: ", ")): opsh does not apply them on its own; run `opsh migrate` (or migrate.up()) when the backend allows"
    }

    /// Sets the global `arg` as `lua` does: arg[0] the script, arg[1…]
    /// its arguments, arg[-1] the interpreter.
    static func setArguments(_ runtime: LuaRuntime, script: String?, arguments: [String]) {
        var table: [(key: Int64, value: String)] = [(-1, CommandLine.arguments.first ?? "opsh")]
        if let script { table.append((0, script)) }
        for (offset, argument) in arguments.enumerated() { table.append((Int64(offset + 1), argument)) }
        runtime.setGlobal("arg", strings: table)
    }
}
