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

    func openSession() -> OpshSession {
        let store: Store
        do {
            store = try Store.open(path: options.db,
                                   options: StoreOptions(readOnly: options.readOnly, busyTimeout: options.busyTimeout))
        } catch {
            fail(.databaseUnavailable, "\(error)")
        }
        do {
            return try OpshSession(store: store, options: .init(sandbox: options.sandbox,
                                                                memoryLimit: options.memoryLimit.map { $0 << 20 }))
        } catch {
            fail(.databaseUnavailable, "cannot start a session on \(store.path ?? "the database"): \(error)")
        }
    }

    /// Sets the global `arg` as `lua` does: arg[0] the script, arg[1…]
    /// its arguments, arg[-1] the interpreter.
    static func setArguments(_ runtime: LuaRuntime, script: String?, arguments: [String]) {
        var table: [LuaValue: LuaValue] = [.integer(-1): .string(CommandLine.arguments.first ?? "opsh")]
        if let script { table[.integer(0)] = .string(script) }
        for (offset, argument) in arguments.enumerated() { table[.integer(Int64(offset + 1))] = .string(argument) }
        runtime.setGlobal("arg", .table(table))
    }

    func fail(_ status: ExitStatus, _ message: String) -> Never {
        console.error(message)
        exit(status.rawValue)
    }
}
