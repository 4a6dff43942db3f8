import Store

/// What a write typed at the prompt shows instead of `db.exec`'s raw
/// values (issue 26, "One way to show things"): `db.exec("DELETE FROM
/// builds WHERE …")` prints "3 rows deleted from builds", not `3   19` (a
/// count and a last rowid a DELETE did not make).
///
/// Which tables and what was done to them come from the engine: the
/// chunk's rows counted per table (SQLite's preupdate hook, PostgreSQL's
/// `CommitTally`) and its schema changes, the counts the commit's note
/// gives, never the statement's words. Only the chunk is read as Lua
/// text: whether the operator typed a `db.exec` call whose values are the
/// chunk's result. A script (`local n = db.exec(…)`) and `opsh -e` keep the
/// numbers.
enum WriteAtThePrompt {
    /// Whether `typed`, which ran as an expression, is a `db.exec` call
    /// alone (`db.exec("…")`, `db.exec [[…]]`): its values are then the
    /// chunk's printed result.
    static func isWriteCall(_ typed: String) -> Bool {
        var text = Substring(typed).drop { $0.isWhitespace }
        while let last = text.last, last.isWhitespace { text = text.dropLast() }
        guard text.hasPrefix("db.exec") else { return false }
        let rest = text.dropFirst("db.exec".count).drop { $0.isWhitespace }
        guard let opening = rest.first, ["(", "\"", "'", "["].contains(opening) else { return false }
        // The call must be the whole chunk: its last character closes it.
        guard let closing = text.last, [")", "\"", "'", "]"].contains(closing) else { return false }
        return true
    }

    /// "3 rows deleted from builds", "1 row inserted into telemetry, 2 rows
    /// updated in schemes", "created table notes"; "done: no rows changed"
    /// when the engine counted nothing (a statement that matched no row, a
    /// SET).
    static func sentence(_ summary: ChangeSummary) -> String {
        var parts: [String] = []
        for table in summary.tables.keys.sorted() {
            let counts = summary.tables[table]!
            for (count, verb) in [(counts.inserted, "inserted into"), (counts.updated, "updated in"), (counts.deleted, "deleted from")]
            where count > 0 {
                parts.append("\(count) \(count == 1 ? "row" : "rows") \(verb) \(table)")
            }
        }
        if !summary.schemaChanges.isEmpty { parts.append(summary.schemaSentence) }
        return parts.isEmpty ? "done: no rows changed" : parts.joined(separator: ", ")
    }
}
