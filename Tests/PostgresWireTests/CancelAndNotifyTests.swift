import Foundation
import Testing
import TestSupport
@testable import PostgresWire

@Suite struct CancelTests {
    /// Cancels `connection`'s statement from another thread once the
    /// server says it runs (polled); the moment it sent the cancel.
    func cancelOnceActive(_ connection: PostgresConnection) throws -> CancelMoment {
        let server = try PostgresServer.shared()
        let canceller = connection.canceller
        let backend = connection.processID
        let moment = CancelMoment()
        Thread {
            _ = try? waitUntil(30) { try server.sql("SELECT state FROM pg_stat_activity WHERE pid = \(backend)") == "active" }
            moment.mark(monotonicSeconds())
            try? canceller.cancel()
        }.start()
        return moment
    }

    @Test func cancelFromAnotherThreadStopsTheQueryWithin1Second() throws {
        let connection = try connect()
        let cancelled = try cancelOnceActive(connection)
        do {
            try connection.query("SELECT pg_sleep(30)")
            Issue.record("pg_sleep(30) was not cancelled")
        } catch let error as PostgresError {
            #expect(error.code == "57014")
            #expect(error.message == "canceling statement due to user request")
        }
        let elapsed = monotonicSeconds() - cancelled.seconds
        #expect(elapsed < 1, "stopped \(elapsed) s after the cancel was sent")
        // The connection goes on.
        #expect(try connection.query("SELECT 1").scalar == .integer(1))
        #expect(connection.transactionStatus == .idle)
    }

    @Test func cancelWhileIdleDoesNothing() throws {
        let connection = try connect()
        try connection.cancel()
        #expect(try connection.query("SELECT 7").scalar == .integer(7))
    }

    @Test func cancelInsideATransactionFailsTheTransaction() throws {
        let connection = try connect()
        try connection.simpleQuery("BEGIN")
        _ = try cancelOnceActive(connection)
        #expect { try connection.simpleQuery("SELECT pg_sleep(30)") } throws: { ($0 as? PostgresError)?.code == "57014" }
        #expect(connection.transactionStatus == .failed)
        try connection.simpleQuery("ROLLBACK")
        #expect(connection.transactionStatus == .idle)
    }
}

@Suite struct NotificationTests {
    @Test func notifyFromAnotherProcessArrives() throws {
        let connection = try connect()
        let channel = "wire_\(getpid())_\(UInt32.random(in: 0...UInt32.max))"
        try connection.simpleQuery("LISTEN \(channel)")
        // Nothing yet: nil after the timeout, not sooner, not later by much.
        let started = monotonicSeconds()
        #expect(try connection.waitForNotification(timeout: 0.3) == nil)
        let waited = monotonicSeconds() - started
        #expect(waited >= 0.29 && waited < 1.0, "waited \(waited) s")
        // psql is another process, another session.
        try PostgresServer.shared().sql("NOTIFY \(channel), 'build 42 done'")
        let notification = try connection.waitForNotification(timeout: 5)
        #expect(notification?.channel == channel)
        #expect(notification?.payload == "build 42 done")
        #expect(notification.map { $0.processID != connection.processID } == true)
        // Waiting never opened a transaction.
        #expect(connection.transactionStatus == .idle)
        #expect(try connection.query("SELECT count(*) FROM pg_stat_activity WHERE pid = pg_backend_pid() AND xact_start IS NOT NULL AND state <> 'active'").scalar == .integer(0))
    }

    @Test func notificationsArrivingDuringQueriesAreQueued() throws {
        let connection = try connect()
        let other = try connect()
        let channel = "wire_q_\(getpid())_\(UInt32.random(in: 0...UInt32.max))"
        try connection.simpleQuery("LISTEN \(channel)")
        try other.query("SELECT pg_notify($1, 'one')", [.text(channel)])
        try other.query("SELECT pg_notify($1, 'two')", [.text(channel)])
        // Queries until the notifications came with an answer (the server
        // delivers them a moment after the notifying commits).
        #expect(try waitUntil(30) {
            try connection.query("SELECT 1")
            return connection.pendingNotificationCount == 2
        })
        #expect(try connection.waitForNotification(timeout: 0)?.payload == "one")
        #expect(try connection.waitForNotification(timeout: 0)?.payload == "two")
        #expect(try connection.waitForNotification(timeout: 0) == nil)
    }

    @Test func notificationInsideATransactionWaitsForItsCommit() throws {
        let connection = try connect()
        let other = try connect()
        let channel = "wire_t_\(getpid())_\(UInt32.random(in: 0...UInt32.max))"
        try connection.simpleQuery("LISTEN \(channel)")
        try other.simpleQuery("BEGIN; NOTIFY \(channel), 'later'")
        #expect(try connection.waitForNotification(timeout: 0.2) == nil)
        try other.simpleQuery("COMMIT")
        #expect(try connection.waitForNotification(timeout: 5)?.payload == "later")
    }
}

/// When a cancel was sent, from the thread that sent it.
final class CancelMoment: @unchecked Sendable {
    private let lock = NSLock()
    private var sent = 0.0

    func mark(_ seconds: Double) { lock.withLock { sent = seconds } }
    var seconds: Double { lock.withLock { sent } }
}
