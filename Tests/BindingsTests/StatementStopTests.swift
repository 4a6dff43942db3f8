import Foundation
import GRDB
import LuaRuntime
import Store
import Synchronization
import Testing
@testable import Bindings

/// A Ctrl-C that lands after a script called `db.*` but before SQLite
/// began stepping was lost: `sqlite3_interrupt` reaches only a statement
/// already running, so the statement then ran to its end (the shell's
/// Ctrl-C test failed so on a busy machine). Every connection Store opens
/// now checks the Lua state's interrupt flag as it steps (`opsh_stop.h`).
/// Here the flag is set before the statement starts, which is that race
/// made certain.
@Suite struct StatementStopTests {
    static let long = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) SELECT count(*) FROM n"

    @Test func aStatementStartedWhileTheInterruptIsSetStops() throws {
        let test = try TestSession()
        let flag = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        defer { flag.deallocate() }
        flag.pointee = 1
        test.database.stopStatements(whenSet: flag)
        defer { test.database.stopStatements(whenSet: test.session.runtime.interruptFlag) }
        #expect(test.failure("return db.value('\(Self.long)')")?.contains("interrupted") == true)
        // On another thread (a build's log writer, say) the same statement
        // is not stopped.
        let elsewhere = Mutex<Int?>(nil)
        let store = test.store
        Thread {
            let count = try? store.writer.read { db in try Int.fetchOne(db, sql: Self.long) }
            elsewhere.withLock { $0 = count ?? -1 }
        }.start()
        #expect(waitUntil(60) { elsewhere.withLock { $0 } != nil })
        #expect(elsewhere.withLock { $0 } == 3_000_000)
        // Control: with the flag clear it runs to its end.
        flag.pointee = 0
        #expect(try test.run("return db.value('\(Self.long)')") == [.integer(3_000_000)])
    }
}
