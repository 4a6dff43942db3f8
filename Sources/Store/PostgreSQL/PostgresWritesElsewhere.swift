import Foundation
import Glibc
import PostgresWire

/// What a PostgreSQL session's process writes through connections other
/// than the session's own (issue 24, items 7 and 14): the job manager's
/// (``PostgresBuildQueue``: `jobs.delete`, `jobs.cancel`, `jobs.create`,
/// `jobs.enqueue`, a build's log lines and end) and a cleanup's at the
/// prompt. SQLite's side is `ChangeTally` with its `ChangeBudget`: every
/// writer connection of the store counts, and the cap of a scope holds on
/// all of them.
///
/// Each transaction on such a connection reads the server's counters of
/// its backend (``CommitTally``) after BEGIN and before COMMIT, in the same
/// round trips: the difference is what it changed, cascades and triggers
/// included. Before it commits, ``willCommit(_:)`` refuses it
/// (``TooManyChanges``, the transaction is rolled back) when a cap is on and
/// the transaction runs on the script's thread, and its rows with what the
/// script changed elsewhere since the cap was put on and in the scope's own
/// transaction so far are past it. A build's own run writes on threads of
/// its own (its log lines, its end): those rows are the build's record,
/// counted for the audit trail, not the script's to cap, as on SQLite.
public final class PostgresWritesElsewhere: @unchecked Sendable {
    /// A cap on the rows a script changes (`--max-changes`), put on by the
    /// session's scope.
    struct Budget {
        let limit: Int
        /// "the run", "the chunk".
        let what: String
        /// The scope's own transaction so far (read on the script's thread,
        /// which is waiting for this write: its connection is free).
        let scope: () throws -> TableChanges
        /// The script's thread.
        let thread: pthread_t
        /// What was committed elsewhere on the script's thread since.
        var committed: TableChanges = [:]
    }

    private let lock = NSLock()
    private var committedRows: TableChanges = [:]
    private var commitCount = 0
    private var budget: Budget?
    private var relations: CommitTally.Relations?

    public init() {}

    /// Rows committed through these connections so far (the audit trail's
    /// counts).
    public var committed: TableChanges { lock.withLock { committedRows } }

    /// Transactions committed through these connections so far: whether
    /// a run used the database (the audit trail records a run that did).
    public var commits: Int { lock.withLock { commitCount } }

    /// Puts a cap on (nil lifts it), for the calling thread's writes.
    func limit(_ limit: Int?, what: String, scope: @escaping () throws -> TableChanges) {
        lock.withLock {
            budget = limit.map { Budget(limit: $0, what: what, scope: scope, thread: pthread_self()) }
        }
    }

    func lift() {
        lock.withLock { budget = nil }
    }

    /// What the script committed elsewhere since the cap was put on.
    var keptUnderTheCap: TableChanges { lock.withLock { budget?.committed ?? [:] } }

    /// Throws ``TooManyChanges`` when committing `changes` on this thread
    /// takes the script past its cap.
    func willCommit(_ changes: TableChanges) throws {
        guard let budget = lock.withLock({ budget }), pthread_equal(budget.thread, pthread_self()) != 0 else { return }
        var total = budget.committed
        total.add(changes)
        total.add(try budget.scope())
        var summary = ChangeSummary()
        summary.tables = total
        if summary.total > budget.limit {
            throw TooManyChanges(limit: budget.limit, summary: summary, what: budget.what, kept: budget.committed)
        }
    }

    /// `changes` were committed.
    func didCommit(_ changes: TableChanges) {
        lock.withLock {
            commitCount += 1
            committedRows.add(changes)
            if let thread = budget?.thread, pthread_equal(thread, pthread_self()) != 0 { budget?.committed.add(changes) }
        }
    }

    /// The tables whose counters are read (read once, on the first
    /// connection that asks: the schema's tables are the same for all).
    func tallyRelations(on connection: PostgresConnection) throws -> CommitTally.Relations {
        if let known = lock.withLock({ relations }) { return known }
        let read = try CommitTally.relations(on: connection)
        lock.withLock { relations = read }
        return read
    }

    /// Runs `body` in a transaction on `connection`, counted: BEGIN with a
    /// reading, `body`, a reading, the cap's check, COMMIT. Rolled back
    /// when `body` or the check throws.
    func transaction<T>(on connection: PostgresConnection, _ body: () throws -> T) throws -> T {
        let relations = try tallyRelations(on: connection)
        let first = try CommitTally.begin("BEGIN", on: connection, relations: relations)
        do {
            let result = try body()
            let last = CommitTally.counts(try connection.query(CommitTally.reading, [.text(relations.oids)]), relations)
            let changed = PostgresDatabase.Measure.carrying(first, into: last).since(first)
            try willCommit(changed)
            try connection.simpleQuery("COMMIT")
            didCommit(changed)
            return result
        } catch {
            if connection.isOpen, connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
            throw error
        }
    }
}
