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

    /// Widest a column may be before values are cut; nil: as wide as its
    /// values, within ``totalWidth``.
    public var maximumColumnWidth: Int?
    /// Box-drawing characters, or ASCII (`+-|`) when the terminal may not
    /// show them.
    public var unicode = true
    /// What NULL looks like.
    public var nullMarker = "∅"

    /// The width of the terminal: the columns share it. Too wide a table
    /// is narrowed widest column first (its values cut with `…`) until it
    /// fits, a column to no less than ``minimumColumnWidth``. Nil: no
    /// limit (a pipe or a file).
    public var totalWidth: Int?
    /// Narrowest a column is cut to (a narrower value keeps its width).
    public var minimumColumnWidth = 8

    public init(maximumColumnWidth: Int? = nil, unicode: Bool = true, totalWidth: Int? = nil) {
        self.maximumColumnWidth = maximumColumnWidth
        self.totalWidth = totalWidth
        self.unicode = unicode
        if !unicode { nullMarker = "NULL" }
    }

    /// How wide the table would be with no terminal limit.
    public func naturalWidth(columns: [String], rows: [[Cell]]) -> Int {
        Self.tableWidth(naturalWidths(columns: columns, texts: texts(columns: columns, rows: rows)))
    }

    /// Whether a row fits the terminal at all, its columns cut to no less
    /// than ``minimumColumnWidth``: when not, show one record at a time
    /// (psql's `\x auto`).
    public func fits(columns: [String], rows: [[Cell]]) -> Bool {
        guard let totalWidth else { return true }
        let narrowest = naturalWidths(columns: columns, texts: texts(columns: columns, rows: rows))
            .map { min($0, minimumColumnWidth) }
        return Self.tableWidth(narrowest) <= totalWidth
    }

    /// Each column takes its width plus " " on both sides and a rule.
    private static func tableWidth(_ widths: [Int]) -> Int { widths.reduce(1, { $0 + $1 + 3 }) }

    private func texts(columns: [String], rows: [[Cell]]) -> [[String]] {
        rows.map { row in
            columns.indices.map { index -> String in
                guard index < row.count else { return "" }
                return display(row[index])
            }
        }
    }

    private func naturalWidths(columns: [String], texts: [[String]]) -> [Int] {
        var widths = columns.map { TextWidth.of($0) }
        for row in texts {
            for (index, text) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], TextWidth.of(text))
            }
        }
        if let maximumColumnWidth { widths = widths.map { min($0, maximumColumnWidth) } }
        return widths
    }

    /// The natural widths narrowed to fit ``totalWidth``: the widest
    /// column loses a column at a time, so columns share the width.
    private func fittedWidths(_ natural: [Int]) -> [Int] {
        guard let totalWidth else { return natural }
        var widths = natural
        var excess = Self.tableWidth(widths) - totalWidth
        while excess > 0, let widest = widths.indices.max(by: { widths[$0] < widths[$1] }), widths[widest] > minimumColumnWidth {
            // Down to the next widest at once (or by the excess), not one by one.
            let next = widths.indices.filter { $0 != widest }.map { widths[$0] }.max() ?? 0
            let cut = max(1, min(excess, widths[widest] - max(next, minimumColumnWidth)))
            widths[widest] -= cut
            excess -= cut
        }
        return widths
    }

    /// The table; `total`: how many rows there were when `rows` are only
    /// the first of them (the footer says so, once).
    public func format(columns: [String], rows: [[Cell]], total: Int? = nil) -> String {
        let texts = texts(columns: columns, rows: rows)
        let widths = fittedWidths(naturalWidths(columns: columns, texts: texts))
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
        output.append(Self.countLine(shown: rows.count, total: total ?? rows.count))
        return output.joined(separator: "\n")
    }

    /// The line under every row set, tables and records alike: `(2 rows)`,
    /// or how many of how many were shown and how to see the rest.
    public static func countLine(shown: Int, total: Int) -> String {
        if shown < total {
            return "(showing the first \(shown) of \(total) rows: .rows all shows every row here; "
                + ".mode csv with .output FILE writes them all; db.rows streams them)"
        }
        return total == 1 ? "(1 row)" : "(\(total) rows)"
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
