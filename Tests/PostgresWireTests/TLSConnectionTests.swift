import Foundation
import Testing
import TestSupport
@testable import PostgresWire

/// The client's TLS below opsh: what an encrypted connection does besides
/// logging in (PostgresTLSTests in OpshTests logs in every way). TLS is
/// PostgreSQL's only: no engine argument.
@Suite struct TLSConnectionTests {
    /// A cancel request goes over TLS when the connection does (libpq's
    /// PQcancelBlocking does too): never in clear text beside it.
    @Test func cancelOnAnEncryptedConnectionIsEncryptedAndStopsTheQuery() throws {
        let server = try PostgresTLSServer.shared()
        let connection = try PostgresConnection(url: server.url())
        #expect(connection.isEncrypted)
        let canceller = connection.canceller
        #expect(canceller.tls?.mode == .require)
        let backend = connection.processID
        Thread {
            _ = try? waitUntil(30) { try server.sql("SELECT state FROM pg_stat_activity WHERE pid = \(backend)") == "active" }
            try? canceller.cancel()
        }.start()
        #expect { try connection.query("SELECT pg_sleep(30)") } throws: { ($0 as? PostgresError)?.code == "57014" }
        #expect(try connection.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").scalar == .bool(true))
        // Control: a connection in clear text cancels in clear text.
        let plain = try PostgresConnection(url: server.url("sslmode=disable"))
        #expect(!plain.isEncrypted)
        #expect(plain.canceller.tls == nil)
    }

    /// Waiting with a deadline on an encrypted connection returns when the
    /// time is up, and a notification arrives through TLS.
    @Test func notificationsArriveAndWaitsEndOverTLS() throws {
        let server = try PostgresTLSServer.shared()
        let listener = try PostgresConnection(url: server.url("sslmode=require"))
        try listener.simpleQuery("LISTEN tls_channel")
        let started = monotonicSeconds()
        #expect(try listener.waitForNotification(timeout: 0.3) == nil)
        #expect(monotonicSeconds() - started >= 0.3)
        try server.sql("NOTIFY tls_channel, 'over TLS'")
        let notification = try listener.waitForNotification(timeout: 30)
        #expect(notification?.payload == "over TLS")
    }
}
