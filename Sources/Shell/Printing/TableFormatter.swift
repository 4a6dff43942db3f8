import TextCodec

/// Renders rows as an aligned text table, the way psql and sqlite3's
/// `.mode table` do:
///
/// ```
/// ┌────┬─────────┬────────┐
/// │ id │ status  │ exit   │
/// ├────┼─────────┼────────┤
/// │ 1  │ running │ ∅      │
/// └────┴─────────┴────────┘
/// (1 row)
/// ```
/// Numbers align right, long values are cut with `…`, NULL shows as `∅`
/// so it cannot be mistaken for the text "NULL" or an empty string.
public struct TableFormatter: Sendable {
    /// One cell.
    public enum Cell: Sendable, Hashable {
        case null
        case number(String)
        case text(String)
    }

    /// Widest a column may be before values are cut.
    public var maximumColumnWidth = 40
    /// Box-drawing characters, or ASCII (`+-|`) when the terminal may not
    /// show them.
    public var unicode = true
    /// What NULL looks like.
    public var nullMarker = "∅"

    /// The width of the terminal: columns are narrowed (widest first, to
    /// no less than 6) until the table fits, instead of wrapping. Nil: no
    /// limit (a pipe or a file).
    public var totalWidth: Int?

    public init(maximumColumnWidth: Int = 40, unicode: Bool = true, totalWidth: Int? = nil) {
        self.maximumColumnWidth = maximumColumnWidth
        self.totalWidth = totalWidth
        self.unicode = unicode
        if !unicode { nullMarker = "NULL" }
    }

    /// How wide the table would be with no terminal limit.
    public func naturalWidth(columns: [String], rows: [[Cell]]) -> Int {
        var widths = columns.map { min(TextWidth.of($0), maximumColumnWidth) }
        for row in rows {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = min(max(widths[index], TextWidth.of(display(cell))), maximumColumnWidth)
            }
        }
        return widths.reduce(1, { $0 + $1 + 3 })
    }

    public func format(columns: [String], rows: [[Cell]]) -> String {
        let texts = rows.map { row in
            columns.indices.map { index -> String in
                guard index < row.count else { return "" }
                return display(row[index])
            }
        }
        var widths = columns.map { min(TextWidth.of($0), maximumColumnWidth) }
        for row in texts {
            for (index, text) in row.enumerated() {
                widths[index] = min(max(widths[index], TextWidth.of(text)), maximumColumnWidth)
            }
        }
        if let totalWidth {
            // Each column takes its width plus " " on both sides and a rule.
            let minimum = 6
            while widths.reduce(1, { $0 + $1 + 3 }) > totalWidth,
                  let widest = widths.indices.max(by: { widths[$0] < widths[$1] }), widths[widest] > minimum {
                widths[widest] -= 1
            }
        }
        let box = unicode
            ? (h: "─", v: "│", tl: "┌", tm: "┬", tr: "┐", ml: "├", mm: "┼", mr: "┤", bl: "└", bm: "┴", br: "┘")
            : (h: "-", v: "|", tl: "+", tm: "+", tr: "+", ml: "+", mm: "+", mr: "+", bl: "+", bm: "+", br: "+")
        func rule(_ left: String, _ middle: String, _ right: String) -> String {
            left + widths.map { String(repeating: box.h, count: $0 + 2) }.joined(separator: middle) + right
        }
        func line(_ cells: [String], rightAligned: [Bool]) -> String {
            var parts: [String] = []
            for (index, cell) in cells.enumerated() {
                let text = TextWidth.truncate(cell, to: widths[index])
                let padding = String(repeating: " ", count: widths[index] - TextWidth.of(text))
                parts.append(" " + (rightAligned[index] ? padding + text : text + padding) + " ")
            }
            return box.v + parts.joined(separator: box.v) + box.v
        }
        var output = [rule(box.tl, box.tm, box.tr),
                      line(columns, rightAligned: columns.map { _ in false }),
                      rule(box.ml, box.mm, box.mr)]
        for (rowIndex, row) in texts.enumerated() {
            let alignment = columns.indices.map { index -> Bool in
                guard index < rows[rowIndex].count, case .number = rows[rowIndex][index] else { return false }
                return true
            }
            output.append(line(row, rightAligned: alignment))
        }
        output.append(rule(box.bl, box.bm, box.br))
        output.append(rows.count == 1 ? "(1 row)" : "(\(rows.count) rows)")
        return output.joined(separator: "\n")
    }

    private func display(_ cell: Cell) -> String {
        switch cell {
        case .null: return nullMarker
        case .number(let text): return text
        case .text(let text):
            // Newlines and tabs would break the grid (↵, →); other control
            // characters show as VisibleText does everywhere.
            let flat = text.contains(where: { $0 == "\n" || $0 == "\t" || $0 == "\r\n" })
                ? String(text.unicodeScalars.map { scalar -> Character in
                    switch scalar {
                    case "\n": return "↵"
                    case "\t": return "→"
                    default: return Character(scalar)
                    }
                })
                : text
            return VisibleText.of(flat)
        }
    }
}
