import PostgresWire

/// `--read-only` on PostgreSQL (issue 24, item 22; ARCHITECTURE.md,
/// "PostgreSQL: the session").
///
/// The server's read-only transaction refuses writes to tables, sequences
/// and the schema, but lets through what it does not count as one: large
/// objects (`lo_from_bytea`, `lo_unlink`), NOTIFY and `pg_notify`, and it
/// would prepare the transaction for two-phase commit. So a read-only
/// transaction of opsh's is never committed: it ends in ROLLBACK, which
/// keeps none of it and sends no notification, and the ``CommitGuard``
/// refuses PREPARE TRANSACTION. What the server reports then refuses the
/// statement with the reason: the transaction was given an id (only a
/// write does that: a large object, `txid_current()`), or the command tag
/// is NOTIFY. `pg_notify()` in a query is not refused, only never sent.
///
/// A SET or RESET (by its command tag) is run again for the session once
/// the rollback is done, so that it lasts as it does outside
/// `--read-only`; `set_config()` in a query does not last.
extension PostgresDatabase {
    /// Whether the transaction has written: the server gives it an id at
    /// its first write.
    static let wroteCheck = "SELECT pg_catalog.txid_current_if_assigned() IS NOT NULL"

    /// `--read-only` outside a transaction: the statement in a read-only
    /// transaction, with the commit guard and under a savepoint (inside a
    /// subtransaction the server refuses `SET transaction_read_only =
    /// off`), then the write check and ROLLBACK: one round trip.
    func readOnly(_ sql: String, _ parameters: [PostgresValue],
                  eachRow: (PostgresDataRow) throws -> Void) throws -> PostgresResult {
        var wrote = false
        let results: [PostgresResult]
        do {
            results = try connection.pipeline([("BEGIN READ ONLY", []), (CommitGuard.declare, []), ("SAVEPOINT opsh_statement", []),
                                               (sql, parameters), (Self.wroteCheck, []), ("ROLLBACK", [])]) { step, row in
                if step == 3 { try eachRow(row) } else if step == 4 { wrote = try row.values().first == .bool(true) }
            }
        } catch {
            let ended = connection.transactionStatus == .idle
            if !ended { _ = try? connection.simpleQuery("ROLLBACK") }
            // The statement ended the read-only transaction and failed doing
            // it: a COMMIT the guard refused, a PREPARE TRANSACTION.
            if ended, let failure = error as? PostgresError, failure.step == 3 {
                throw PostgresStoreError.transactionControl(sql, server: failure.message)
            }
            throw error
        }
        let tag = results[3].commandTag
        if wrote { throw PostgresStoreError.readOnlyWrote(sql) }
        if tag == "NOTIFY" { throw PostgresStoreError.readOnlyNotify(sql) }
        if TransactionControl.isControl(tag) { throw PostgresStoreError.transactionControl(sql, server: nil) }
        if tag == "SET" || tag == "RESET" { try connection.query(sql, parameters) }
        return results[3]
    }

    /// A statement that ran in a read-only transaction of opsh's: a NOTIFY
    /// is refused (the transaction's rollback drops it), a SET or RESET is
    /// noted, to be run again for the session after the rollback.
    func noteReadOnly(_ sql: String, _ tag: String) throws {
        if tag == "NOTIFY" { throw PostgresStoreError.readOnlyNotify(sql) }
        if tag == "SET" || tag == "RESET" { readOnlySettings.append((depth, sql)) }
    }

    /// Ends opsh's outermost read-only transaction: `steps` (a last
    /// reading), the write check and ROLLBACK, in one round trip; then the
    /// transaction's SETs again, for the session. Throws when it wrote.
    /// Returns the results of `steps`.
    func rollBackReadOnly(before steps: [(sql: String, parameters: [PostgresValue])]) throws -> [PostgresResult] {
        let settings = readOnlySettings
        readOnlySettings.removeAll()
        let results: [PostgresResult]
        do {
            results = try connection.pipeline(steps + [(Self.wroteCheck, []), ("ROLLBACK", [])])
        } catch {
            if connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
            throw error
        }
        if results[steps.count].rows.first?.first == .bool(true) { throw PostgresStoreError.readOnlyTransactionWrote }
        for setting in settings { try connection.query(setting.sql) }
        return Array(results.prefix(steps.count))
    }
}
