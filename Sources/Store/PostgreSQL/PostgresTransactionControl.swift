import PostgresWire

/// Transaction control sent by a script, as the server reports it: what
/// the PostgreSQL session refuses, after ``CommitGuard`` made sure that
/// none of it commits opsh's transaction (ARCHITECTURE.md, "PostgreSQL: the
/// session"; issue 24, items 17, 18 and 25).
///
/// The server's words decide, never the statement's: its command tag
/// (`BEGIN` for `START TRANSACTION` too, `COMMIT` for `END`, `ROLLBACK` for
/// `ABORT` and `ROLLBACK TO`), the transaction state it reports after each
/// exchange, and SQLSTATEs only transaction control raises. What each
/// leaves:
///
/// - inside opsh's transaction, a statement that cannot commit (`BEGIN`,
///   `SAVEPOINT`, `ROLLBACK TO` its own savepoint) ran under the
///   statement's savepoint and changed nothing: refused, the transaction
///   goes on;
/// - one that ended the transaction (`COMMIT`, refused by the server
///   through the commit guard; `ROLLBACK`; `PREPARE TRANSACTION`, refused
///   too) or broke opsh's savepoints (`RELEASE` or `ROLLBACK TO` one of
///   them): the transaction is rolled back whole, nothing committed, and
///   every later statement in it is refused until opsh's transaction ends;
/// - outside any transaction, `BEGIN` opened one of the script's own: it
///   is rolled back at once (nothing ran in it) and refused, so that what
///   the script does next is not held in a transaction the run's end
///   would commit; `COMMIT` and `ROLLBACK` there do nothing and are
///   refused with the same reason.
///
/// `COMMIT PREPARED` and `ROLLBACK PREPARED` act on another session's
/// prepared transaction, not on opsh's: the server runs them only outside
/// a transaction block, and they are left to the operator (the way to
/// clear a transaction left prepared).
enum TransactionControl {
    /// The command tags of statements that begin, end or release a
    /// transaction or savepoint.
    static let tags: Set<String> = ["BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE",
                                    "PREPARE TRANSACTION"]

    static func isControl(_ commandTag: String) -> Bool {
        tags.contains(commandTag)
    }

    /// SQLSTATEs only transaction control raises: 2D000 (a COMMIT or
    /// ROLLBACK in a DO block or procedure run inside a transaction block)
    /// and 3B001 (`RELEASE` or `ROLLBACK TO` a savepoint that does not
    /// exist).
    static let codes: Set<String> = ["2D000", "3B001"]

    /// A statement's own failure, as the caller reports it: transaction
    /// control the server refused is said so (it changed nothing); any
    /// other error is the server's, without the pipeline's step.
    static func reported(_ error: any Error, _ sql: String) -> any Error {
        guard var failure = error as? PostgresError else { return error }
        if codes.contains(failure.code) {
            return PostgresStoreError.transactionControl(sql, server: failure.message)
        }
        failure.step = nil
        failure.completedCommandTags = []
        return failure
    }
}
