import Foundation

/// What a connection and its cancellers share, so that a CancelRequest is
/// sent only for a statement the connection has in flight and can stop
/// nothing sent after it.
///
/// The server interrupts whatever the backend runs when the request's
/// signal arrives, and PostgreSQL's postmaster signals the backend twice
/// (its process, then its process group): on a busy machine the second
/// signal can land after the first stopped the statement, on the next one
/// the client sent (a `<close>` handler's cleanup SQL after Ctrl-C). A
/// signal that finds the backend waiting for a command is dropped; the
/// server closes the cancel connection only after signalling. So:
/// - a canceller sends only while a cycle (a Sync or a simple Query) is
///   unanswered, and raises the fence first (``raiseIfRunning()``);
/// - the connection writes nothing while the fence is up
///   (``beforeWriting(cycles:)``): the next statement leaves only after
///   the server closed the cancel connection, when every signal has found
///   the statement meant or an idle backend.
final class CancelFence: @unchecked Sendable {
    private let condition = NSCondition()
    /// Cycles written and not yet answered by ReadyForQuery.
    private var unanswered = 0
    /// Cancel requests being sent now.
    private var sending = 0

    /// For a canceller: raises the fence and returns true when a statement
    /// is in flight; false (nothing to cancel) otherwise.
    func raiseIfRunning() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard unanswered > 0 else { return false }
        sending += 1
        return true
    }

    /// For a canceller whose request the server has closed (or that gave up).
    func lower() {
        condition.lock()
        sending -= 1
        if sending == 0 { condition.broadcast() }
        condition.unlock()
    }

    /// On the connection's thread, before it writes: waits while a cancel
    /// is being sent, then counts the `cycles` the write starts.
    func beforeWriting(cycles: Int) {
        condition.lock()
        while sending > 0 { condition.wait() }
        unanswered += cycles
        condition.unlock()
    }

    /// On the connection's thread: a ReadyForQuery was read.
    func answered() {
        condition.lock()
        unanswered = max(0, unanswered - 1)
        condition.unlock()
    }

    /// The connection was closed: nothing is in flight on it any more.
    func closed() {
        condition.lock()
        unanswered = 0
        condition.unlock()
    }
}
