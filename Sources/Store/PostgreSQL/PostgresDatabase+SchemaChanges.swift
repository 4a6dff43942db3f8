import PostgresWire

// What a transaction did to the schema on PostgreSQL, for the limits
// (`--max-changes`, `maxChanges`: a schema change is over any limit unless
// allowed), the shell's question and the dry run's report; and the rows of
// the tables it dropped, counted as deleted (issue 24, item 10).

extension PostgresDatabase {
    /// What a transaction changed in the schema, and the rows the tables
    /// it dropped held, per table, as deleted.
    struct SchemaDifference {
        var changes: [SchemaChange] = []
        var droppedRows: TableChanges = [:]
    }

    /// The schema as the open transaction begins, when `watching` (a
    /// limit or a question needs to know what the transaction did to it).
    func watchSchema(_ watching: Bool) throws -> PostgresSchemaSnapshot? {
        schemaChanged = false
        return watching ? try PostgresSchemaSnapshot(connection) : nil
    }

    /// What the open transaction did to the schema since `before`: compared
    /// when it wrote the server's catalog (``PostgresSchemaSnapshot/catalogWrites``,
    /// which a `DO` block's DDL moves as much as a statement's), when a
    /// statement's command tag said so, or `always`. `pending`: the last
    /// reading of the audit's counters (``Measure``), which keeps what was
    /// written into a table before it was dropped.
    func schemaDifference(since before: PostgresSchemaSnapshot?, pending: TableChanges,
                          always: Bool = false) throws -> SchemaDifference {
        guard let before else { return SchemaDifference() }
        let wroteCatalog = try always || schemaChanged
            || PostgresSchemaSnapshot.catalogWrites(on: connection) != before.catalogWrites
        guard wroteCatalog else { return SchemaDifference() }
        let now = try PostgresSchemaSnapshot(connection)
        // A table TRUNCATE emptied without a note counts as a dropped one.
        return SchemaDifference(changes: before.changes(to: now),
                                droppedRows: try rowsOfDroppedTables(before.droppedTables(to: now) + before.emptiedTables(to: now),
                                                                     pending: pending))
    }

    /// The rows the dropped `tables` held, as deleted rows.
    ///
    /// What PostgreSQL can tell, and what it cannot: a table dropped in the
    /// open transaction is gone from its view, with its counters (a table
    /// has no row count of its own, and counting the rows before every
    /// statement that might drop one would cost a scan each). Until the
    /// transaction ends the server's shared statistics still hold the
    /// table's live rows (`pg_stat_get_live_tuples`): every session's
    /// committed inserts less deletes as it handed them over — at once for
    /// opsh's own transactions (`pg_stat_force_next_flush()` as they
    /// commit, PostgreSQL 15 and later), within about a second for other
    /// writers, at a VACUUM or ANALYZE their estimate (exact for a table
    /// ANALYZE reads whole, extrapolated for a large one). To them this
    /// session adds what it wrote there and had not handed over yet (the
    /// last reading of its counters before the drop: `pending`). So the
    /// count is exact for a table whose writers all committed a second or
    /// more before, and an estimate otherwise; it is never a row count
    /// taken at the drop.
    func rowsOfDroppedTables(_ tables: [(oid: Int64, name: String)], pending: TableChanges) throws -> TableChanges {
        guard !tables.isEmpty else { return [:] }
        let oids = "{" + tables.map { String($0.oid) }.joined(separator: ",") + "}"
        let result = try connection.query("""
            SELECT o::pg_catalog.int8, pg_catalog.pg_stat_get_live_tuples(o)
            FROM pg_catalog.unnest($1::pg_catalog.text::pg_catalog.oid[]) AS o
            """, [.text(oids)])
        var live: [Int64: Int64] = [:]
        for row in result.rows {
            if case let .integer(oid) = row[0], case let .integer(rows) = row[1] { live[oid] = rows }
        }
        var dropped: TableChanges = [:]
        for table in tables {
            let unflushed = pending[table.name].map { $0.inserted - $0.deleted } ?? 0
            let rows = max(0, Int(live[table.oid] ?? 0) + unflushed)
            if rows > 0 { dropped[table.name] = TableChangeCounts(deleted: rows) }
        }
        return dropped
    }
}
