import GRDB

/// Rows inserted, updated and deleted per table: what a dry run reports,
/// what a shell chunk asks about, what a changeset holds.
public struct ChangeSummary: Sendable, Equatable {
    /// The audit trail's counts of one table (ChangeTally).
    public typealias Counts = TableChangeCounts
    public var tables: TableChanges = [:]
    /// What it did to the database file's schema (tables, indexes, views,
    /// triggers made, dropped or changed).
    public var schemaChanges: [SchemaChange] = []
    public init() {}
    public var isEmpty: Bool { tables.isEmpty && schemaChanges.isEmpty }
    /// "dropped table telemetry, created index zi on builds".
    public var schemaSentence: String { schemaChanges.map(\.description).joined(separator: ", ") }
    /// Rows changed in all (inserted + updated + deleted).
    public var total: Int { tables.values.reduce(0) { $0 + $1.total } }
    /// "builds: 3 updated; buildLogs: 10 deleted; schema: dropped table t",
    /// tables by name.
    public var sentence: String {
        ([rowsSentence] + (schemaChanges.isEmpty ? [] : ["schema: " + schemaSentence]))
            .filter { !$0.isEmpty }.joined(separator: "; ")
    }
    /// The rows alone: "builds: 3 updated; buildLogs: 10 deleted".
    public var rowsSentence: String {
        tables.keys.sorted().compactMap { name -> String? in
            let counts = tables[name]!
            let parts = [(counts.inserted, "inserted"), (counts.updated, "updated"), (counts.deleted, "deleted")]
                .filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
            return parts.isEmpty ? nil : "\(name): " + parts.joined(separator: ", ")
        }.joined(separator: "; ")
    }
    /// One line a table, by name: "  builds: 0 inserted, 3 updated, 0 deleted"
    /// (what a dry run reports and a shell chunk asks about).
    public var tableLines: [String] {
        tables.sorted { $0.key < $1.key }.map { table, counts in
            "  \(table): \(counts.inserted) inserted, \(counts.updated) updated, \(counts.deleted) deleted"
        } + (schemaChanges.isEmpty ? [] : ["  the schema: " + schemaSentence])
    }

    /// Counts one row `kind` changed in `table`.
    public mutating func count(_ table: String, _ kind: DatabaseEvent.Kind) {
        var counts = tables[table] ?? Counts()
        switch kind {
        case .insert: counts.inserted += 1
        case .update: counts.updated += 1
        case .delete: counts.deleted += 1
        }
        tables[table] = counts
    }

    /// Adds `other`'s counts.
    public mutating func add(_ other: ChangeSummary) {
        tables.add(other.tables)
        schemaChanges += other.schemaChanges
    }
}

