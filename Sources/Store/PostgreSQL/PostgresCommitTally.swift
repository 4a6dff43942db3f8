import PostgresWire

/// The audit trail's rows per table on PostgreSQL (SQLite's `ChangeTally`):
/// what each transaction of the session's connection committed, from the
/// server's own counters.
///
/// `pg_stat_get_xact_tuples_inserted` (and `_updated`, `_deleted`) give,
/// per table, the open transaction's rows plus those of this backend's
/// earlier transactions that it has not yet added to the shared statistics
/// (it does so when idle, at most once a second). No flush happens inside
/// a transaction, so two readings in one transaction, one at its start and
/// one at its end, differ by exactly what it changed, cascades and
/// triggers included. Each reading is one statement in the same round trip
/// as BEGIN, COMMIT or the statement itself (a pipeline), over the
/// relations' oids read once and again after a statement that changes the
/// schema: about 10 µs of the server's time per reading here, where the
/// `pg_stat_xact_user_tables` view costs about 100 µs.
enum CommitTally {
    /// The tables whose counters are read: their oids as an array literal,
    /// and their names keyed as rows are (``PostgresNames``).
    struct Relations {
        let oids: String
        let names: [Int64: String]
    }

    /// Every table, partitioned table and materialized view outside the
    /// system schemas (what `pg_stat_xact_user_tables` covers), but for
    /// temporary ones: they go with the session (a dry run's guard among
    /// them), so nothing of them is kept to count.
    static func relations(on connection: PostgresConnection) throws -> Relations {
        let result = try connection.query("""
            SELECT c.oid::pg_catalog.int8, c.relname::pg_catalog.text
            FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
            WHERE c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,m}'::pg_catalog."char"[])
              AND n.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema}'::pg_catalog.name[])
              AND n.nspname OPERATOR(pg_catalog.!~) '^pg_toast' AND n.nspname OPERATOR(pg_catalog.!~) '^pg_temp_'
            """)
        var names: [Int64: String] = [:]
        for row in result.rows {
            guard case let .integer(oid) = row[0], case let .text(name) = row[1] else { continue }
            names[oid] = PostgresNames.rowKey(name)
        }
        return Relations(oids: "{" + names.keys.sorted().map(String.init).joined(separator: ",") + "}", names: names)
    }

    /// Each table's counters: `$1` is the oids; `WHERE` limits the
    /// tables' rows (a one-time filter when it names no column).
    ///
    /// TRUNCATE deletes every row without counting one, so the schema's
    /// `BEFORE TRUNCATE` triggers (``truncateNotes``) note each table's
    /// rows just before it is emptied in the transaction's own setting
    /// `opsh.truncated` ("oid:rows,…"), which the server undoes with the
    /// transaction or savepoint that set it: those rows read as deleted.
    ///
    /// Every name in it is qualified (functions, operators, types): it runs
    /// right after a script's statement, with the search_path the script
    /// left, where a function `s.pg_stat_get_xact_tuples_deleted` first on
    /// the path would otherwise count nothing (28f).
    private static func counters(where condition: String = "true") -> String {
        """
          SELECT o::pg_catalog.int8, pg_catalog.pg_stat_get_xact_tuples_inserted(o) AS i,
                 pg_catalog.pg_stat_get_xact_tuples_updated(o) AS u, pg_catalog.pg_stat_get_xact_tuples_deleted(o) AS d
          FROM pg_catalog.unnest($1::pg_catalog.text::pg_catalog.oid[]) o WHERE \(condition)
          UNION ALL
          SELECT pg_catalog.split_part(note, ':', 1)::pg_catalog.int8, 0, 0, pg_catalog.split_part(note, ':', 2)::pg_catalog.int8
          FROM pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.current_setting('opsh.truncated', true), ',')) note
          WHERE note OPERATOR(pg_catalog.<>) '' AND \(condition)
        """
    }

    /// `i + u + d > 0`, qualified.
    static let counted = "((i OPERATOR(pg_catalog.+) u) OPERATOR(pg_catalog.+) d) OPERATOR(pg_catalog.>) 0"
    /// The transaction has written (it has an id), qualified.
    static let written = "pg_catalog.txid_current_if_assigned() IS NOT NULL"

    /// The trigger function that notes a table's rows before TRUNCATE
    /// empties it (see ``counters(where:)``), and its trigger on each of
    /// opsh's tables: PostgreSQL's side of migration `005_auditChain`.
    /// Counting costs one scan of the table, paid only by a TRUNCATE.
    static func truncateNotes(tables: [String]) -> String {
        """
        CREATE OR REPLACE FUNCTION opsh_note_truncate() RETURNS trigger LANGUAGE plpgsql AS $f$
        DECLARE n bigint;
        BEGIN
          EXECUTE format('SELECT count(*) FROM %I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME) INTO n;
          PERFORM pg_catalog.set_config('opsh.truncated',
            COALESCE(pg_catalog.current_setting('opsh.truncated', true), '') || TG_RELID::bigint || ':' || n || ',', true);
          RETURN NULL;
        END $f$;
        """ + tables.map { table in
            "\nDROP TRIGGER IF EXISTS opsh_note_truncate ON \(table);"
                + "\nCREATE TRIGGER opsh_note_truncate BEFORE TRUNCATE ON \(table) FOR EACH STATEMENT EXECUTE FUNCTION opsh_note_truncate();"
        }.joined()
    }

    /// Only tables with counts come back (most have none).
    static let reading = "SELECT * FROM (\(counters())) counts WHERE \(counted)"

    static func step(_ relations: Relations) -> (sql: String, parameters: [PostgresValue]) {
        (reading, [.text(relations.oids)])
    }

    /// A reading only once the transaction has written (it has an xid):
    /// before that there is nothing new to read, and the server skips the
    /// counters (a one-time filter) instead of calling three functions
    /// per table. An empty result then means "as at the transaction's
    /// start".
    static let readingOnceWritten =
        "SELECT * FROM (\(counters(where: written))) counts WHERE \(counted)"

    static func stepOnceWritten(_ relations: Relations) -> (sql: String, parameters: [PostgresValue]) {
        (readingOnceWritten, [.text(relations.oids)])
    }

    /// ``readingOnceWritten`` that also asks the server, when the
    /// transaction wrote, to hand this backend's counts to the shared
    /// statistics as it next goes idle, at the end of this exchange
    /// (`pg_stat_force_next_flush()`, PostgreSQL 15 and later): the
    /// counters read in the next transaction then start from nothing, so
    /// the statement after it needs no reading before it. Only when it
    /// wrote: a forced flush costs the server a pass over its shared
    /// statistics, and a query leaves no counts of rows changed. One
    /// statement, so a query costs one step more, not two.
    static let readingOnceWrittenThenFlush = """
        WITH written AS MATERIALIZED (
          SELECT pg_catalog.pg_stat_force_next_flush() WHERE \(written))
        SELECT counts.* FROM written, (\(counters(where: written))) counts
        WHERE \(counted)
        """

    /// A reading's counts, tables with none left out.
    static func counts(_ result: PostgresResult, _ relations: Relations) -> TableChanges {
        var counts: TableChanges = [:]
        for row in result.rows {
            guard case let .integer(oid) = row[0], let name = relations.names[oid] else { continue }
            var change = TableChangeCounts()
            if case let .integer(n) = row[1] { change.inserted = Int(n) }
            if case let .integer(n) = row[2] { change.updated = Int(n) }
            if case let .integer(n) = row[3] { change.deleted = Int(n) }
            if change.total > 0 { counts[name] = (counts[name] ?? .init()) + change }
        }
        return counts
    }

    /// `BEGIN`, the statement that guards the transaction (the
    /// ``CommitGuard``'s DECLARE, if any) and the first reading, in one
    /// round trip, and `also` after them (the sandbox's first reading,
    /// ``PostgresSandbox``), whose rows `alsoRows` gets. (The last reading
    /// goes with the COMMIT: ``step(_:)`` before it in the same pipeline.)
    static func begin(_ begin: String, on connection: PostgresConnection, relations: Relations,
                      guardedBy guardStatement: String? = nil,
                      also: (sql: String, parameters: [PostgresValue])? = nil,
                      alsoRows: ([PostgresValue]) -> Void = { _ in }) throws -> TableChanges {
        var steps: [(sql: String, parameters: [PostgresValue])] = [(begin, [])]
        if let guardStatement { steps.append((guardStatement, [])) }
        let reading = steps.count
        steps.append(step(relations))
        if let also { steps.append(also) }
        do {
            var readings: [[PostgresValue]] = []
            var results = try connection.pipeline(steps) { step, row in
                if step == reading { readings.append(try row.values()) } else if step > reading { alsoRows(try row.values()) }
            }
            results[reading].rows = readings
            return counts(results[reading], relations)
        } catch {
            if connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
            throw error
        }
    }

    /// One statement outside a transaction block, in its implicit
    /// transaction with the readings around it: its result and the rows
    /// it changed. With `flushes` (PostgreSQL 15 and later) the exchange
    /// ends with ``flush``, and `nothingPending` says the last exchange on
    /// the connection did (nothing ran since): then the counters start
    /// from nothing and the reading before the statement is left out, and
    /// the one after it is ``readingOnceWrittenThenFlush``. A statement that does
    /// not write (a query) then costs the server no reading at all.
    static func around(_ sql: String, _ parameters: [PostgresValue], on connection: PostgresConnection,
                       relations: Relations, flushes: Bool, nothingPending: Bool,
                       eachRow: (PostgresDataRow) throws -> Void) throws -> (PostgresResult, TableChanges) {
        let readsBefore = !(flushes && nothingPending)
        var steps: [(sql: String, parameters: [PostgresValue])] = []
        if readsBefore { steps.append(step(relations)) }
        let statement = steps.count
        steps.append((sql, parameters))
        let readingAfter = steps.count
        steps.append(flushes ? (readingOnceWrittenThenFlush, [.text(relations.oids)]) : step(relations))
        var before: [[PostgresValue]] = []
        var after: [[PostgresValue]] = []
        var results: [PostgresResult]
        do {
            results = try connection.pipeline(steps) { step, row in
                if step == statement { try eachRow(row) } else if step < statement { before.append(try row.values()) }
                else if step == readingAfter { after.append(try row.values()) }
            }
        } catch var error as PostgresError {
            // Callers know the statement as step 1 (a reading before it).
            if let failed = error.step { error.step = failed - statement + 1 }
            throw error
        }
        var changed: TableChanges = [:]
        if !after.isEmpty || !flushes {
            results[readingAfter].rows = after
            var start: TableChanges = [:]
            if readsBefore {
                results[0].rows = before
                start = counts(results[0], relations)
            }
            changed = counts(results[readingAfter], relations).since(start)
        }
        return (results[statement], changed)
    }
}
