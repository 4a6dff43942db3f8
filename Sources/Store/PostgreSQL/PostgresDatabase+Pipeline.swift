import PostgresWire

/// A write sent without waiting for its result (``PostgresDatabase/send(_:_:origin:)``).
struct DeferredWrite {
    /// As rewritten for the server.
    let sql: String
    let parameters: [PostgresValue]
    /// Where the script sent it (`file:line:`), for its error.
    let origin: String?
}

/// Writes inside a transaction at the server's speed: pipelined, as
/// psycopg 3's pipeline mode and libpq's do (ARCHITECTURE.md, "PostgreSQL:
/// the session"; issue 25, item 8).
///
/// ``send(_:_:origin:)`` (the `db` module's `db.send`) is a write whose
/// result the script does not need. Inside opsh's transaction it is queued
/// and goes to the server with the ones after it, up to
/// ``deferredBatchSize`` in one round trip: `SAVEPOINT`, the writes,
/// `RELEASE`, with one `Sync`: the server runs them back to back.
///
/// **When an error is raised.** A queued write that fails is raised at the
/// latest by the next call that talks to the server (a `db.query`, a
/// `db.exec`, another `db.send` that fills the batch: the connection runs
/// the queue first, ``PostgresConnection/beforeNextCall``), or at the end
/// of the transaction or savepoint it was sent in, which then rolls back as
/// it does for any error of its body. The error names the write's SQL and
/// where the script sent it (``PostgresStoreError/deferredWriteFailed(origin:failure:)``).
/// **What counts**: the writes sent before it, and nothing from it on: the
/// batch is rolled back to its savepoint and the writes before the failed
/// one run again (the server skipped the rest), so a script that catches
/// the error goes on as if the failed write had been a `db.exec` that
/// raised and the later ones had not been sent.
///
/// A write the server cancelled (Ctrl-C, `--timeout`) is not followed by
/// the run again of the ones before it; one that waited for a lock past
/// `--busy-timeout` is reported as any statement's lock timeout is
/// (``PostgresStoreError/locked(_:server:busyTimeout:holders:)``).
///
/// **What is never deferred** (it runs as `db.exec` runs, at once):
/// - a statement the session has not seen the server run yet as an
///   INSERT, UPDATE, DELETE or MERGE without result columns (its first run
///   teaches it: the command tag the server reports for a prepared
///   statement's text is the same every time), so that transaction control
///   (which the session must see at once: ``TransactionControl``), DDL (the
///   schema's caches) and `RETURNING` never wait in the queue;
/// - outside a transaction (autocommit needs each statement's result to
///   refuse transaction control);
/// - under `--sandbox`, whose check compares the counters around each
///   statement and rolls back that statement alone;
/// - under `--read-only` (the server refuses every write: nothing to speed).
///
/// The audit's counts and `--max-changes` stay exact: each batch reads the
/// server's counters before its writes (in the same round trip), and a
/// batch rolled back is set aside as a failed statement is (``Measure``).
extension PostgresDatabase {
    /// The most writes in one round trip: their answers (about 20 bytes
    /// each) fit the socket's buffers while the client still writes, so
    /// neither side waits on the other.
    static let deferredBatchSize = 1_000

    /// Runs `sql` as a write whose result nobody needs: queued when it can
    /// be (see the extension's documentation), else run at once as
    /// ``execute(_:_:)``. `origin` is where the script sent it.
    public func send(_ sql: String, _ arguments: Arguments = .positional([]), origin: String?) throws {
        try scriptStatements { try sendScripts(sql, arguments, origin: origin) }
    }

    private func sendScripts(_ sql: String, _ arguments: Arguments, origin: String?) throws {
        // A loop sends one statement again and again: the last one is kept.
        let statement: PostgresPlaceholders
        let deferrable: Bool
        if let last = lastSent, last.sql == sql {
            (statement, deferrable) = (last.statement, last.deferrable)
        } else {
            statement = try rewrite(sql)
            deferrable = deferrableStatements.contains(statement.sql)
            lastSent = deferrable ? (sql, statement, true) : nil
        }
        guard depth > 0, !checksSandbox, !options.readOnly, deferrable,
              connection.transactionStatus == .inTransaction else {
            let result = try execute(sql, arguments)
            if depth > 0, result.columns.isEmpty, Self.deferrableTags.contains(lastCommandTag.prefix { $0 != " " }) {
                deferrableStatements.insert(statement.sql)
            }
            return
        }
        let parameters = try PostgresArguments.parameters(for: statement, arguments, sql: sql)
        statementCount += 1
        deferredWrites.append(DeferredWrite(sql: statement.sql, parameters: parameters, origin: origin))
        guard deferredWrites.count >= Self.deferredBatchSize else {
            if connection.beforeNextCall == nil { connection.beforeNextCall = { [unowned self] in try self.flushDeferred() } }
            return
        }
        // What runs here must not run the queue again.
        connection.beforeNextCall = nil
        try sendBatch()
        connection.beforeNextCall = { [unowned self] in try self.flushDeferred() }
    }

    /// The command tags of the writes ``send(_:_:origin:)`` may defer.
    static let deferrableTags: Set<Substring> = ["INSERT", "UPDATE", "DELETE", "MERGE"]

    /// Runs the queued writes now and reads what is in flight; the first
    /// failure is thrown (``PostgresStoreError/deferredWriteFailed(origin:failure:)``).
    func flushDeferred() throws {
        connection.beforeNextCall = nil
        if !deferredWrites.isEmpty { try sendBatch() }
        if let last = batchInFlight {
            batchInFlight = nil
            try receive(last, then: nil)
        }
    }

    /// Drops the queued writes: the transaction or savepoint they were
    /// sent in is being rolled back. A batch in flight is read (its
    /// answers are in the way of the next call's) and forgotten.
    func discardDeferred() {
        deferredWrites.removeAll()
        connection.beforeNextCall = nil
        if let last = batchInFlight {
            batchInFlight = nil
            _ = try? connection.receivePipeline(last.pipeline) { _, _ in }
        }
    }

    /// Sends the queued writes as one pipeline, without waiting; then
    /// reads the batch sent before it, which the server has run meanwhile
    /// (or is running: the client made this batch while it did).
    private func sendBatch() throws {
        // A script's writes: its search_path (PostgresOwnPath).
        try sending(.script) { try sendBatchOfScript() }
    }

    private func sendBatchOfScript() throws {
        let batch = deferredWrites
        deferredWrites.removeAll(keepingCapacity: true)
        guard connection.transactionStatus == .inTransaction || batchInFlight != nil else {
            discardDeferred()
            batchInFlight = nil
            throw dryRunning ? PostgresStoreError.dryRunEnded : PostgresStoreError.transactionEnded
        }
        let layout = try BatchLayout(batch, readsAfter: dryRunning || countsFailedStatementsExactly,
                                     relations: measure != nil ? tallyRelations() : nil)
        let sent = BatchInFlight(writes: batch, layout: layout, pipeline: try connection.sendPipeline(layout.steps))
        let previous = batchInFlight
        batchInFlight = sent
        if let previous { try receive(previous, then: sent) }
    }

    /// The results of `batch`; when it failed, `next` (sent after it, so
    /// refused by the server as the transaction had failed) is read too,
    /// and the failure handled (``recover(_:_:from:readings:)``).
    private func receive(_ batch: BatchInFlight, then next: BatchInFlight?) throws {
        var readings = BatchReadings()
        let results: [PostgresResult]
        do {
            results = try connection.receivePipeline(batch.pipeline) { step, row in try readings.take(step, row, batch.layout) }
        } catch let error as PostgresError {
            if let next {
                _ = try? connection.receivePipeline(next.pipeline) { _, _ in }
                batchInFlight = nil
            }
            try recover(batch.writes[...], batch.layout, from: error, readings: readings)
        }
        try accept(results, batch.layout, readings: readings)
    }

    /// Writes again, at once, in one round trip (what came before a
    /// failed write in its batch).
    private func runDeferred(_ writes: ArraySlice<DeferredWrite>) throws {
        try sending(.script) { try runDeferredOfScript(writes) }
    }

    private func runDeferredOfScript(_ writes: ArraySlice<DeferredWrite>) throws {
        guard !writes.isEmpty else { return }
        guard connection.transactionStatus == .inTransaction else {
            throw dryRunning ? PostgresStoreError.dryRunEnded : PostgresStoreError.transactionEnded
        }
        let layout = try BatchLayout(writes, readsAfter: dryRunning || countsFailedStatementsExactly,
                                     relations: measure != nil ? tallyRelations() : nil)
        var readings = BatchReadings()
        let results: [PostgresResult]
        do {
            results = try connection.pipeline(layout.steps) { step, row in try readings.take(step, row, layout) }
        } catch let error as PostgresError {
            try recover(writes, layout, from: error, readings: readings)
        }
        try accept(results, layout, readings: readings)
    }

    /// A batch that ran: the counters read around it.
    private func accept(_ results: [PostgresResult], _ layout: BatchLayout, readings: BatchReadings) throws {
        guard connection.transactionStatus == .inTransaction,
              !results[layout.first..<layout.release].contains(where: { TransactionControl.isControl($0.commandTag) }) else {
            // Cannot happen for the writes deferred (see above); if it did,
            // nothing of the transaction is kept.
            discardDeferred()
            _ = try? connection.simpleQuery("ROLLBACK")
            throw PostgresStoreError.transactionControlRolledBack(layout.steps[layout.first].sql, reason: nil)
        }
        if let relations = layout.relations, var current = measure {
            current.read(CommitTally.counts(PostgresResult(columns: [], rows: readings.before, commandTag: ""), relations))
            if !readings.after.isEmpty {
                current.read(CommitTally.counts(PostgresResult(columns: [], rows: readings.after, commandTag: ""), relations))
            }
            measure = current
        }
    }

    /// A batch that failed: rolled back to its savepoint (what it changed
    /// set aside from the counts, ``Measure/rolledBack(to:)``), the writes
    /// before the failed one run again, and the failure thrown, naming
    /// where the script sent the write.
    private func recover(_ writes: ArraySlice<DeferredWrite>, _ layout: BatchLayout, from error: PostgresError,
                         readings: BatchReadings) throws -> Never {
        guard let step = error.step else { throw error }
        if let relations = layout.relations, !readings.before.isEmpty, var current = measure {
            // The reading before the writes ran: where to set aside from.
            current.read(CommitTally.counts(PostgresResult(columns: [], rows: readings.before, commandTag: ""), relations))
            measure = current
        }
        guard connection.transactionStatus == .failed else {
            _ = try? connection.simpleQuery("ROLLBACK")
            throw PostgresStoreError.transactionControlRolledBack(layout.steps[layout.first].sql, reason: error.message)
        }
        try rollBackStatement(measure != nil ? layout.relations : nil)
        guard (layout.first..<layout.release).contains(step) else {
            throw TransactionControl.reported(error, layout.steps[step].sql)
        }
        let failed = writes.index(writes.startIndex, offsetBy: step - layout.first)
        // The server skipped what followed the failed write; what came
        // before it was rolled back with the batch: it runs again. (Not
        // after a cancel, Ctrl-C or --timeout: the run is being stopped.)
        if error.code != "57014" { try runDeferred(writes[writes.startIndex..<failed]) }
        let write = writes[failed]
        if error.code == "55P03" {
            // A lock held past --busy-timeout: said as for any statement
            // (exit status 3), with where the write was sent.
            throw PostgresStoreError.locked(write.origin.map { "\(write.sql) (sent at \($0))" } ?? write.sql, server: error.message,
                                            busyTimeout: options.lockTimeout, holders: nil)
        }
        let reported = TransactionControl.reported(error, write.sql)
        throw PostgresStoreError.deferredWriteFailed(origin: write.origin, failure: "\(reported)")
    }
}

/// One batch's steps: `SAVEPOINT opsh_statement`, the counters (in a
/// measured transaction), the writes, `RELEASE`, the counters again when
/// they are kept current statement by statement.
struct BatchLayout {
    var steps: [(sql: String, parameters: [PostgresValue])] = [("SAVEPOINT opsh_statement", [])]
    /// The first write's step, and RELEASE's.
    var first = 0
    var release = 0
    let relations: CommitTally.Relations?
    let readsAfter: Bool

    init<Writes: Collection<DeferredWrite>>(_ writes: Writes, readsAfter: Bool, relations: CommitTally.Relations?) throws {
        self.relations = relations
        self.readsAfter = relations != nil && readsAfter
        steps.reserveCapacity(writes.count + 4)
        if let relations { steps.append(CommitTally.step(relations)) }
        first = steps.count
        for write in writes { steps.append((write.sql, write.parameters)) }
        release = steps.count
        steps.append(("RELEASE SAVEPOINT opsh_statement", []))
        if let relations, self.readsAfter { steps.append(CommitTally.stepOnceWritten(relations)) }
    }
}

/// A batch sent and not read yet.
struct BatchInFlight {
    let writes: [DeferredWrite]
    let layout: BatchLayout
    let pipeline: PipelineInFlight
}

/// The counters' rows a batch returned, before and after its writes.
struct BatchReadings {
    var before: [[PostgresValue]] = []
    var after: [[PostgresValue]] = []

    mutating func take(_ step: Int, _ row: PostgresDataRow, _ layout: BatchLayout) throws {
        if layout.relations != nil, step == 1 { before.append(try row.values()) }
        else if layout.readsAfter, step == layout.release + 1 { after.append(try row.values()) }
    }
}
