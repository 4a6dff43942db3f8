import TextCodec

/// Renders rows one record at a time, a `column | value` line per column
/// and every value whole: psql's expanded display (`\x`), sqlite3's
/// `.mode line`. For rows too wide for a table (a generation's prompt, a
/// log line, a JSON document), where `.mode table` cuts values.
///
/// ```
/// -[ RECORD 1 ]--------------------
/// id     | 42
/// prompt | Summarise the build log
///        | of the last failed build
/// error  | ∅
/// (1 row)
/// ```
struct RecordFormatter {
    /// What NULL looks like.
    var nullMarker = "∅"
    /// The widest a record's header rule gets (the terminal's width); nil:
    /// 80 columns.
    var totalWidth: Int?

    func format(columns: [String], rows: [[TableFormatter.Cell]], total: Int? = nil) -> String {
        let nameWidth = columns.map(TextWidth.of).max() ?? 0
        let records = rows.map { row in
            columns.indices.flatMap { index -> [String] in
                let name = columns[index]
                let values = index < row.count ? display(row[index]) : [""]
                let labels = [name + String(repeating: " ", count: nameWidth - TextWidth.of(name))]
                    + Array(repeating: String(repeating: " ", count: nameWidth), count: values.count - 1)
                return zip(labels, values).map { $1.isEmpty ? $0 + " |" : $0 + " | " + $1 }
            }
        }
        // One rule width for every record: the widest line, within the terminal.
        let widest = records.joined().map(TextWidth.of).max() ?? 0
        let ruleWidth = min(widest, totalWidth ?? 80)
        var output: [String] = []
        for (number, lines) in records.enumerated() {
            let header = "-[ RECORD \(number + 1) ]"
            output.append(header + String(repeating: "-", count: max(1, ruleWidth - TextWidth.of(header))))
            output += lines
        }
        output.append(TableFormatter.countLine(shown: rows.count, total: total ?? rows.count))
        return output.joined(separator: "\n")
    }

    /// A value's lines; control characters other than tab would move the
    /// cursor, so they show as VisibleText does everywhere.
    private func display(_ cell: TableFormatter.Cell) -> [String] {
        switch cell {
        case .null: return [nullMarker]
        case .number(let text): return [text]
        case .text(let text):
            return VisibleText.of(text, keepingNewlines: true).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        }
    }
}
