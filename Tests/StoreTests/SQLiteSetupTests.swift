import CSQLiteStore
import Foundation
import GRDB
import GRDBSQLite
import Testing
@testable import Store

/// SQLite's process-wide settings (`opsh_sqlite_setup.c`): made as the
/// executable loads, so they hold for every connection of the process.
@Suite struct SQLiteSetupTests {
    /// Memory statistics off: SQLite's allocations take no global mutex.
    /// With them on, the inserts and frees below would count (the control:
    /// SQLite documents sqlite3_memory_used as that count).
    @Test func sqliteKeepsNoMemoryStatistics() throws {
        #expect(opsh_sqlite_memory_statistics_off() != 0)
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try store.client.write { db in
            try db.execute(sql: "CREATE TABLE t (v TEXT)")
            for index in 0..<1_000 { try db.execute(sql: "INSERT INTO t VALUES (?)", arguments: [String(repeating: "x", count: index)]) }
        }
        #expect(sqlite3_memory_used() == 0)
        #expect(sqlite3_memory_highwater(0) == 0)
    }
}
