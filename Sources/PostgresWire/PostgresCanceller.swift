/// Cancels the query a ``PostgresConnection`` is running, from another
/// thread: what Ctrl-C and a time limit need while the connection's own
/// thread is blocked reading the query's answer.
///
/// PostgreSQL cancels through a second, short connection: the client sends
/// a CancelRequest carrying the server process id and the secret key the
/// server gave at start-up (BackendKeyData), and the server interrupts that
/// process's current statement, which then fails with SQLSTATE `57014`
/// ("canceling statement due to user request"). The connection itself is
/// untouched and usable afterwards.
///
/// A canceller is a value (Sendable): take it from
/// ``PostgresConnection/canceller`` on the connection's thread and hand it
/// to the thread or signal-watching task that may cancel. Cancelling when
/// no query runs does nothing (nothing is sent). Unlike libpq's PQcancel, a
/// cancel that crosses the end of one query cannot hit the next one: the
/// connection writes nothing until the server has closed the cancel
/// connection (``CancelFence``).
public struct PostgresCanceller: Sendable {
    let endpoint: PostgresURL.Endpoint
    let processID: Int32
    let secretKey: Int32
    let timeout: Double
    /// The connection's TLS when it is encrypted: the cancel request goes
    /// encrypted too (as libpq's PQcancelBlocking does), never in clear text.
    let tls: TLSSettings?
    /// The connection's: whether a statement is in flight, and what holds
    /// its next write until this request has been handled.
    let fence: CancelFence

    /// Sends the CancelRequest when the connection has a statement in
    /// flight, and waits (up to the connection's connect_timeout) until
    /// the server has read it and closed the cancel connection; the
    /// connection's next write waits meanwhile.
    public func cancel() throws {
        guard fence.raiseIfRunning() else { return }
        defer { fence.lower() }
        try sendRequest()
    }

    private func sendRequest() throws {
        let socket = try Socket.connect(to: endpoint, timeout: timeout)
        defer { socket.close() }
        if let tls {
            _ = try socket.startTLS(tls, endpoint: endpoint, deadline: monotonicSeconds() + timeout, limit: timeout)
        }
        try socket.send(Frontend.cancelRequest(processID: processID, secretKey: secretKey))
        // The server answers nothing and closes the connection once it has
        // signalled the backend: wait for that end of file, as libpq does.
        if try socket.poll(timeout: timeout) {
            var scratch = [UInt8](repeating: 0, count: 16)
            _ = try? scratch.withUnsafeMutableBytes { try socket.receive(into: $0) }
        }
    }
}
