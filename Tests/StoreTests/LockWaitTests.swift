import Foundation
import GRDB
import Store
import Synchronization
import Testing

/// Writes wait for another connection's lock up to the busy timeout, and
/// give up at once when the wait is abandoned.
@Suite struct LockWaitTests {
    /// Another connection to the same file holding the write lock.
    final class Holder: Sendable {
        let queue: DatabaseQueue
        init(path: String) throws {
            var configuration = Configuration()
            configuration.allowsUnsafeTransactions = true
            queue = try DatabaseQueue(path: path, configuration: configuration)
            try queue.inDatabase { try $0.execute(sql: "BEGIN IMMEDIATE") }
        }
        func release() { try? queue.inDatabase { try $0.execute(sql: "COMMIT") } }
    }

    final class Flag: Sendable {
        private let value = Atomic(false)
        var isSet: Bool { value.load(ordering: .relaxed) }
        func set(_ newValue: Bool) { value.store(newValue, ordering: .relaxed) }
    }

    func insertTelemetry(_ store: Store) throws {
        try store.client.write { db in
            try db.execute(sql: "INSERT INTO telemetry (event, created_at) VALUES ('e', 0)")
        }
    }

    @Test func aLockReleasedWithinTheBusyTimeoutIsWaitedFor() throws {
        let directory = TemporaryDirectory()
        let store = try Store.open(path: directory.file("db.sqlite"), options: StoreOptions(busyTimeout: 30))
        let holder = try Holder(path: directory.file("db.sqlite"))
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { holder.release() }
        try insertTelemetry(store)
        #expect(try store.client.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM telemetry") } == 1)
    }

    @Test func aLockHeldPastTheBusyTimeoutFailsTheWrite() throws {
        let directory = TemporaryDirectory()
        let store = try Store.open(path: directory.file("db.sqlite"), options: StoreOptions(busyTimeout: 0.2))
        let holder = try Holder(path: directory.file("db.sqlite"))
        defer { holder.release() }
        #expect {
            try insertTelemetry(store)
        } throws: { error in
            (error as? DatabaseError)?.resultCode == .SQLITE_BUSY
        }
    }

    /// `--busy-timeout 1e300` is a number of seconds like any other (it
    /// used to overflow the milliseconds handed to SQLite and crash).
    @Test func anyBusyTimeoutWaits() throws {
        #expect(LockWait(timeout: 1e300).retry(afterTries: 0))
        #expect(LockWait(timeout: 1e300).retry(afterTries: 1_000_000))
        #expect(!LockWait(timeout: 0).retry(afterTries: 0))
    }

    /// What Ctrl-C does to a script waiting for a lock: the wait ends
    /// with "database is locked" long before the lock is released.
    @Test func anAbandonedWaitGivesUpBeforeTheLockIsReleased() throws {
        let directory = TemporaryDirectory()
        let store = try Store.open(path: directory.file("db.sqlite"), options: StoreOptions(busyTimeout: 60))
        let holder = try Holder(path: directory.file("db.sqlite"))
        let interrupted = Flag(), released = Flag()
        store.lockWait.abandon(when: { interrupted.isSet })
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { interrupted.set(true) }
        // Released after 10 s: a wait that was not abandoned would succeed then.
        DispatchQueue.global().asyncAfter(deadline: .now() + 10) {
            released.set(true)
            holder.release()
        }
        #expect {
            try insertTelemetry(store)
        } throws: { error in
            (error as? DatabaseError)?.resultCode == .SQLITE_BUSY
        }
        #expect(!released.isSet)
        // Once no longer abandoned, waits wait again.
        interrupted.set(false)
        holder.release()
        try insertTelemetry(store)
    }
}
