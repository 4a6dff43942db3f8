import Foundation
import Git
import LuaRuntime
import Store
@testable import Bindings

/// A session on a new database file in a temporary folder.
final class TestSession {
    let folder: URL
    let store: Store
    let session: OpshSession

    init(options: OpshSession.Options = .init()) throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("opsh-bindings-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        store = try Store.open(path: folder.appendingPathComponent("test.sqlite").path)
        session = try OpshSession(store: store, options: options)
    }

    deinit { try? FileManager.default.removeItem(at: folder) }

    var path: String { folder.appendingPathComponent("test.sqlite").path }

    /// The session's SQLite database (these tests' sessions are SQLite's).
    var database: SessionDatabase { session.database as! SessionDatabase }

    @discardableResult
    func run(_ code: String, _ arguments: [LuaValue] = []) throws -> [LuaValue] {
        try session.runtime.execute(code, chunkName: "=test", arguments: arguments)
    }

    /// The message of the error `code` raises.
    func failure(_ code: String) -> String? {
        do {
            try run(code)
            return nil
        } catch let error as LuaError {
            return error.message
        } catch {
            return "\(error)"
        }
    }

    /// Runs SQL with the sqlite3 command-line shell: a second process.
    /// (posix_spawn, not Foundation's Process, whose `run()` crashes now
    /// and then under parallel tests on this toolchain.)
    func sqlite3(_ sql: String) throws -> String {
        try sqlite3CLI(path, sql)
    }
}

/// Interrupts `runtime`'s chunk from another thread once the chunk calls
/// `arrived()` (registered here): a chunk calls it right before the
/// blocking call the test interrupts, so the interrupt lands in that call
/// however busy the machine, not after a guessed delay.
func interruptOnArrival(_ runtime: LuaRuntime, _ reason: LuaInterruptReason = .interrupted) {
    let arrival = Arrival()
    runtime.register("arrived") { _ in
        arrival.arrive()
        return 0
    }
    Thread {
        arrival.wait()
        runtime.interruptWhenRunning(reason, patience: 60)
    }.start()
}
