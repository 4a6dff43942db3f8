import Testing
import TextCodec
@testable import Shell

@Suite struct TableFormatterTests {
    @Test func alignsColumnsMarksNullAndCountsRows() {
        let table = TableFormatter().format(
            columns: ["id", "status", "exitCode"],
            rows: [[.number("1"), .text("running"), .null],
                   [.number("12"), .text("failed"), .number("3")]])
        #expect(table == """
            ┌────┬─────────┬──────────┐
            │ id │ status  │ exitCode │
            ├────┼─────────┼──────────┤
            │  1 │ running │ ∅        │
            │ 12 │ failed  │        3 │
            └────┴─────────┴──────────┘
            (2 rows)
            """)
    }

    @Test func cutsLongValuesAndKeepsTheGridWithWideCharacters() {
        let formatter = TableFormatter(maximumColumnWidth: 8)
        let table = formatter.format(columns: ["content"], rows: [[.text("a very long line\nwith a break")], [.text("日本語")]])
        let lines = table.split(separator: "\n")
        #expect(lines[3] == "│ a very … │")
        #expect(lines[4] == "│ 日本語   │")
        #expect(table.hasSuffix("(2 rows)"))
    }

    /// Emoji shown as emoji take two columns in a table as in `chart`
    /// (one table, TextCodec's TextWidth): the grid stays straight.
    @Test func emojiAndCombiningMarksKeepTheGrid() {
        let table = TableFormatter().format(columns: ["s"], rows: [[.text("🚀 go")], [.text("e\u{301}te\u{301}")], [.text("👩‍🔬")]])
        let lines = table.split(separator: "\n")
        #expect(lines[3] == "│ 🚀 go │")
        #expect(lines[4] == "│ e\u{301}te\u{301}   │")
        #expect(lines[5] == "│ 👩‍🔬    │")
    }

    @Test func asciiModeForDumbTerminals() {
        let table = TableFormatter(unicode: false).format(columns: ["x"], rows: [[.null]])
        #expect(table == "+------+\n| x    |\n+------+\n| NULL |\n+------+\n(1 row)")
    }

    @Test func wideTablesAreNarrowedToTheTerminalInsteadOfWrapping() {
        let row: [TableFormatter.Cell] = [.text(String(repeating: "a", count: 36)), .text(String(repeating: "b", count: 36)), .number("7")]
        let table = TableFormatter(totalWidth: 60).format(columns: ["id", "schemeId", "n"], rows: [row])
        let lines = table.split(separator: "\n").dropLast()  // the row count
        for line in lines { #expect(TextWidth.of(String(line)) <= 60) }
        #expect(lines[3] == "│ aaaaaaaaaaaaaaaaaaaaaaa… │ bbbbbbbbbbbbbbbbbbbbbbbb… │ 7 │")
        // Without a width (a pipe, a file) nothing is cut below the maximum.
        #expect(TableFormatter().format(columns: ["id"], rows: [[row[0]]]).contains(String(repeating: "a", count: 36)))
    }
}
