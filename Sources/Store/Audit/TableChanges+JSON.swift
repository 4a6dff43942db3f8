import TextCodec

/// Counts per table as JSON: the audit trail's `changes` column, its
/// syslog line and the spool's files (``AuditTrail/changesJSON(_:)``).
extension Dictionary where Key == String, Value == TableChangeCounts {
    /// `{"builds":{"deleted":0,"inserted":1,"updated":0}}`.
    var json: JSON {
        .object(map { table, counts in
            (table, .object([("deleted", .integer(Int64(counts.deleted))), ("inserted", .integer(Int64(counts.inserted))),
                             ("updated", .integer(Int64(counts.updated)))]))
        })
    }

    /// The counts of such an object; nil unless every table has all three.
    init?(json: JSON) {
        guard let tables = json.members else { return nil }
        self.init()
        for (table, counts) in tables {
            guard let inserted = counts["inserted"]?.integerValue, let updated = counts["updated"]?.integerValue,
                  let deleted = counts["deleted"]?.integerValue else { return nil }
            self[table] = TableChangeCounts(inserted: Int(inserted), updated: Int(updated), deleted: Int(deleted))
        }
    }
}
