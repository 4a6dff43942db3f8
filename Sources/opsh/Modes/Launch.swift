import Bindings
import Foundation
import LuaRuntime
import Shell
import Store

/// What every mode does first: open the database and a session on it,
/// ending the process with status 3 when the database is unavailable.
struct Launch {
    let options: CommonOptions
    let console: Console

    init(options: CommonOptions) {
        self.options = options
        console = Console(colour: Terminal.wantsColour(descriptor: 2), quiet: options.quiet)
    }

    /// - parameter interactive: the shell connects to the database before
    ///   its first prompt (a database opsh cannot use is refused at once)
    ///   and installs every module (completion sees every function). The
    ///   batch modes connect and install modules on first use, so a script
    ///   that never touches the database starts in a few milliseconds.
    /// - parameter requireReasonFromDatabase: refuse the database's first
    ///   use when it asks for a reason (``ReasonRequired``): a run without
    ///   `--reason` on such a database.
    func openSession(interactive: Bool, requireReasonFromDatabase: Bool = false) -> OpshSession {
        let store: Store
        do {
            var storeOptions = StoreOptions(readOnly: options.readOnly, busyTimeout: options.busyTimeout)
            if requireReasonFromDatabase { storeOptions.afterConnecting = ReasonRequired.check }
            // Only the default location is made without being asked: a
            // mistyped --db or OPSH_DB must not succeed on an empty database.
            storeOptions.createIfMissing = !options.readOnly && (options.create || !Self.namesADatabase(options))
            store = interactive ? try Store.open(path: options.db, options: storeOptions)
                : try Store.prepare(path: options.db, options: storeOptions)
        } catch {
            fail(.databaseUnavailable, "\(error)")
        }
        do {
            let session = try OpshSession(store: store, options: .init(sandbox: options.sandbox,
                                                                       memoryLimit: options.memoryLimit.map { $0 << 20 },
                                                                       lazyModules: !interactive))
            session.database.allowsSchemaChanges = options.allowSchemaChanges
            return session
        } catch {
            fail(.databaseUnavailable, "cannot start a session on \(store.path ?? "the database"): \(error)")
        }
    }

    /// Before opsh exits: a passive checkpoint (it waits for nobody), so
    /// that a plain copy of the database file holds what opsh committed.
    /// Nothing when opsh never connected or opened the file read-only.
    static func checkpointAtExit(_ session: OpshSession) {
        guard session.store.isConnected, !session.store.options.readOnly else { return }
        _ = try? session.store.checkpoint(.passive)
    }

    /// A sentence about migrations the database lacks, or nil.
    static func pendingMigrationsNote(_ store: Store) -> String? {
        let pending = store.pendingMigrations
        guard !pending.isEmpty else { return nil }
        return "this database lacks migrations \(pending.joined(separator: ", ")): opsh does not apply them on its own; run `opsh migrate` (or migrate.up()) when the backend allows"
    }

    /// Whether the database was named (`--db` or `OPSH_DB`) rather than
    /// found at the default location.
    static func namesADatabase(_ options: CommonOptions) -> Bool {
        options.db != nil || getenv("OPSH_DB").map { $0.pointee != 0 } == true
    }

    /// Sets the global `arg` as `lua` does: arg[0] the script, arg[1…]
    /// its arguments, arg[-1] the interpreter.
    static func setArguments(_ runtime: LuaRuntime, script: String?, arguments: [String]) {
        var table: [(key: Int64, value: String)] = [(-1, CommandLine.arguments.first ?? "opsh")]
        if let script { table.append((0, script)) }
        for (offset, argument) in arguments.enumerated() { table.append((Int64(offset + 1), argument)) }
        runtime.setGlobal("arg", strings: table)
    }

    func fail(_ status: ExitStatus, _ message: String) -> Never {
        console.error(message)
        exit(status.rawValue)
    }
}
