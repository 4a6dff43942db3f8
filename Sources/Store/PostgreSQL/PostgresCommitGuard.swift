import PostgresWire

/// What makes each transaction opsh opens on PostgreSQL (`db.transaction`,
/// a shell chunk, a script of several statements, a Lua migration) one
/// that only opsh commits, whatever a script's SQL sends inside it:
/// `COMMIT`, `END`, `COMMIT AND CHAIN`, `PREPARE TRANSACTION`, in any
/// spelling, in a script of several statements (ARCHITECTURE.md,
/// "PostgreSQL: the session"; issue 24, item 17).
///
/// **How.** A cursor `WITH HOLD` is declared as the transaction begins
/// (in the same round trip as `BEGIN`). PostgreSQL keeps a holdable
/// cursor's rows past the commit by running its query to the end as it
/// commits, and refuses `PREPARE TRANSACTION` in a transaction that made
/// one. This cursor's query fails when it runs (a cast of a stable
/// function's text to an integer, which the planner does not fold at
/// `DECLARE`), so the server fails any commit that reaches it and rolls
/// the transaction back whole, and refuses to prepare it: nothing of it is
/// kept. opsh closes the cursor just before its own `COMMIT`, in the same
/// round trip. No table, no privilege (a role without TEMPORARY can use
/// it), no transaction id, nothing written: a read-only transaction can
/// hold it too.
///
/// **Why not refuse the statement before it runs**, as SQLite's guard
/// does (`TransactionGuard`, from the compiled statement)? PostgreSQL
/// parses without running only in the extended protocol's Parse, which
/// tells transaction control apart from other statements only inside an
/// aborted transaction block (where it accepts nothing else): each new
/// statement would cost a round trip and two errors in the server's log,
/// the statement's text with its literals among them. The server's own
/// account of a statement comes after it runs (its command tag, the
/// transaction state in ReadyForQuery, its SQLSTATE): what
/// ``TransactionControl`` reads for the statements that cannot commit
/// (BEGIN, SAVEPOINT, RELEASE, ROLLBACK TO). A deferred constraint trigger
/// on a temporary table (the dry run's guard, ``PostgresDatabase/dryRunGuard``)
/// needs the TEMPORARY privilege and gives every transaction an id.
///
/// **What gets past it**: a statement that names the cursor: `CLOSE
/// opsh_commit_guard` followed by a `COMMIT` (opsh's own commit then finds
/// it gone and rolls back, but the script's came first), or a `FETCH` from
/// it, whose failure leaves a failed cursor the server drops at commit.
/// `CLOSE ALL` does not name it: its command tag is seen and the guard
/// declared again.
enum CommitGuard {
    static let name = "opsh_commit_guard"

    /// What the server says when the guard refused a commit: SQLSTATE
    /// 22P02, "invalid input syntax for type integer: \"opsh: …\"".
    static let reason = "opsh: only opsh commits this transaction, never a statement sent through db"

    /// Declared as the transaction begins.
    static let declare = "DECLARE \(name) CURSOR WITH HOLD FOR SELECT CAST(pg_catalog.concat('\(reason)') AS integer)"

    /// Sent just before opsh's own COMMIT, in the same round trip.
    static let close = "CLOSE \(name)"

    /// SQLSTATE 34000 (no such cursor) from ``close``: a statement closed
    /// the guard by name.
    static func wasClosed(_ error: any Error) -> Bool {
        (error as? PostgresError)?.code == "34000"
    }
}
