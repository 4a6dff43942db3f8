import CSQLiteStore
import Foundation
import GRDB
import GRDBSQLite
import Synchronization
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

    /// SQLite allocates through opsh's per-thread cache of small blocks
    /// (`opsh_sqlite_memory.c`), and its blocks stay whole across threads:
    /// connections opened on this thread are used and closed on eight
    /// others (a block freed by another thread than the one that took it),
    /// writing and reading back values of every size class and larger, and
    /// the threads end (each hands its kept blocks back). Every value reads
    /// back byte for byte, there and from another connection afterwards.
    @Test func sqliteAllocatesThroughThePerThreadBlockCache() throws {
        #expect(opsh_sqlite_block_cache_used() != 0)
        let directory = TemporaryDirectory()
        let path = directory.file("blocks.sqlite")
        func open() -> OpaquePointer? {
            var handle: OpaquePointer?
            guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK else { return nil }
            sqlite3_busy_timeout(handle, 30_000)
            return handle
        }
        let setup = try #require(open())
        #expect(sqlite3_exec(setup, "PRAGMA journal_mode = WAL; CREATE TABLE v (worker INTEGER, n INTEGER, text TEXT)", nil, nil, nil) == SQLITE_OK)
        sqlite3_close(setup)
        /// Value `n` of a worker: 1 to 1,500 bytes, so every class and malloc's own.
        @Sendable func value(_ worker: Int, _ n: Int) -> String {
            String(repeating: Character(UnicodeScalar(UInt8(97 + (worker + n) % 26))), count: 1 + (n * 37) % 1_500)
        }
        let workers = 8, rows = 500
        // Addresses: a connection is handed whole to the thread that uses it.
        let handles = (0..<workers).map { _ in Int(bitPattern: open()) }
        let failures = Mutex<[String]>([])
        let finished = DispatchSemaphore(value: 0)
        for worker in 0..<workers {
            let address = handles[worker]
            Thread.detachNewThread {
                let handle = OpaquePointer(bitPattern: address)
                defer { sqlite3_close(handle); finished.signal() }
                var insert: OpaquePointer?, select: OpaquePointer?
                sqlite3_prepare_v2(handle, "INSERT INTO v VALUES (?, ?, ?)", -1, &insert, nil)
                sqlite3_prepare_v2(handle, "SELECT text FROM v WHERE worker = ? AND n = ?", -1, &select, nil)
                defer { sqlite3_finalize(insert); sqlite3_finalize(select) }
                for n in 0..<rows {
                    let text = value(worker, n)
                    sqlite3_bind_int64(insert, 1, Int64(worker))
                    sqlite3_bind_int64(insert, 2, Int64(n))
                    sqlite3_bind_text(insert, 3, text, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self))
                    let stepped = sqlite3_step(insert)
                    sqlite3_reset(insert)
                    sqlite3_bind_int64(select, 1, Int64(worker))
                    sqlite3_bind_int64(select, 2, Int64(n))
                    let found = sqlite3_step(select) == SQLITE_ROW ? String(cString: sqlite3_column_text(select, 0)) : nil
                    sqlite3_reset(select)
                    if stepped != SQLITE_DONE || found != text {
                        failures.withLock { $0.append("worker \(worker) row \(n): step \(stepped), read \(found?.count ?? -1) bytes") }
                        return
                    }
                }
            }
        }
        for _ in 0..<workers { finished.wait() }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        let reader = try #require(open())
        defer { sqlite3_close(reader) }
        var select: OpaquePointer?
        sqlite3_prepare_v2(reader, "SELECT worker, n, text FROM v", -1, &select, nil)
        defer { sqlite3_finalize(select) }
        var count = 0
        while sqlite3_step(select) == SQLITE_ROW {
            let worker = Int(sqlite3_column_int64(select, 0)), n = Int(sqlite3_column_int64(select, 1))
            #expect(String(cString: sqlite3_column_text(select, 2)) == value(worker, n))
            count += 1
        }
        #expect(count == workers * rows)
    }
}
