import Foundation
import Testing
import TestSupport
@testable import PostgresWire

@Suite struct CancelTests {
    @Test func cancelFromAnotherThreadStopsTheQueryWithin1Second() throws {
        let connection = try connect()
        let canceller = connection.canceller
        let started = monotonicSeconds()
        let thread = Thread {
            Thread.sleep(forTimeInterval: 0.3)
            try? canceller.cancel()
        }
        thread.start()
        do {
            try connection.query("SELECT pg_sleep(30)")
            Issue.record("pg_sleep(30) was not cancelled")
        } catch let error as PostgresError {
            #expect(error.code == "57014")
            #expect(error.message == "canceling statement due to user request")
        }
        let elapsed = monotonicSeconds() - started
        #expect(elapsed < 1.3, "cancelled after \(elapsed) s (0.3 s of it before cancelling)")
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
        let canceller = connection.canceller
        try connection.simpleQuery("BEGIN")
        Thread { Thread.sleep(forTimeInterval: 0.2); try? canceller.cancel() }.start()
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
        // Give the server a moment, then run a query: the notifications come with its answer.
        Thread.sleep(forTimeInterval: 0.1)
        try connection.query("SELECT 1")
        #expect(connection.pendingNotificationCount == 2)
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
