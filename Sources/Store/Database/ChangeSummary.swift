/// Rows inserted, updated and deleted per table: what a dry run reports,
/// what a shell chunk asks about, what a changeset holds.
public struct ChangeSummary: Sendable, Equatable {
    public struct Counts: Sendable, Equatable {
        public var inserted = 0
        public var updated = 0
        public var deleted = 0
        public init(inserted: Int = 0, updated: Int = 0, deleted: Int = 0) {
            self.inserted = inserted
            self.updated = updated
            self.deleted = deleted
        }
    }
    public var tables: [String: Counts] = [:]
    public init() {}
    public var isEmpty: Bool { tables.isEmpty }
    /// Rows changed in all (inserted + updated + deleted).
    public var total: Int { tables.values.reduce(0) { $0 + $1.inserted + $1.updated + $1.deleted } }
    /// "builds: 3 updated; buildLogs: 10 deleted", tables by name.
    public var sentence: String {
        tables.keys.sorted().map { name in
            let counts = tables[name]!
            let parts = [(counts.inserted, "inserted"), (counts.updated, "updated"), (counts.deleted, "deleted")]
                .filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
            return "\(name): " + parts.joined(separator: ", ")
        }.joined(separator: "; ")
    }
    /// Adds `other`'s counts.
    public mutating func add(_ other: ChangeSummary) {
        for (name, counts) in other.tables {
            var mine = tables[name] ?? Counts()
            mine.inserted += counts.inserted
            mine.updated += counts.updated
            mine.deleted += counts.deleted
            tables[name] = mine
        }
    }
}

