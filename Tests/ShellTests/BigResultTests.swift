import Foundation
import Bindings
import LuaRuntime
import Store
import Testing
@testable import Shell

/// Big results at the prompt (issue 17, section 4): a row set shows its
/// first rows and says how many there were, a long value costs what is
/// shown, and rows too wide for the terminal come one record at a time.
@Suite struct BigResultTests {
    let session: OpshSession

    init() throws {
        session = try OpshSession(store: try Store.inMemory())
    }

    func show(_ code: String, mode: OutputMode = .table, rows: Int? = 200, width: Int? = nil) throws -> String {
        var printer = ValuePrinter(mode: mode, unicode: true)
        printer.totalWidth = width
        printer.maximumRows = rows
        return try session.runtime.execute(code, chunkName: "=test") { stack, first, count in
            try printer.render(stack.state, first: first, count: count)
        } ?? ""
    }

    static let thousandRows = "return db.query('WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) SELECT i AS id FROM n')"

    @Test func aRowSetShowsItsFirstRowsAndSaysHowManyThereWere() throws {
        let text = try show(Self.thousandRows)
        #expect(text.contains("(showing the first 200 of 1000 rows: .rows all shows every row here; .mode csv with .output FILE writes them all; db.rows streams them)"))
        #expect(text.contains("│ 200 │") && !text.contains("│ 201 │"))
        // One count line, not "(200 rows)" as well.
        #expect(!text.contains("(200 rows)"), "\(text.suffix(300))")
        // Control: without a limit (.rows all, or a file) every row.
        let all = try show(Self.thousandRows, rows: nil)
        #expect(all.contains("│ 1000 │") && !all.contains("showing the first"))
        // CSV (what .output FILE gets) is never cut.
        let csv = try show(Self.thousandRows, mode: .csv)
        #expect(csv.split(separator: "\n").count == 1001)
    }

    @Test func aLongValueCostsWhatIsShown() throws {
        try session.runtime.execute("big = string.rep('é', 25 * 1024 * 1024)")  // 50 MB
        // At a terminal a column is at most as wide as the terminal.
        let table = try show("return db.query('SELECT ? AS payload, 1 AS id', big)", width: 80)
        #expect(table.utf8.count < 2_000, "\(table.utf8.count) bytes of table for one row")
        #expect(table.contains("é…"))
        // To a file (no width), a value is read up to maximumValueBytes.
        let filed = try show("return db.query('SELECT ? AS payload, 1 AS id', big)")
        #expect(filed.utf8.count < 30_000, "\(filed.utf8.count) bytes of table for one row")
        #expect(filed.contains("… (52428800 bytes)"))
        let record = try show("return db.query('SELECT ? AS payload', big)", mode: .line)
        #expect(record.utf8.count < 10_000)
        #expect(record.contains("… (52428800 bytes)"), "\(record.suffix(200))")
    }

    /// Rows that cannot fit even with every column cut to
    /// `minimumColumnWidth` come one record at a time, values whole; rows
    /// that fit once cut share the width (issue 26, "Widths that fit").
    @Test func rowsTooWideForTheTerminalComeOneRecordAtATime() throws {
        let wide = "return db.query(\"SELECT 1 AS id, '\(String(repeating: "a", count: 35))' AS first, '\(String(repeating: "b", count: 35))' AS second, '\(String(repeating: "c", count: 35))' AS third\")"
        let narrow = try show(wide, width: 30)
        #expect(narrow.contains("-[ RECORD 1 ]"))
        #expect(narrow.contains(String(repeating: "b", count: 35)))
        // At 80 columns the three share the width, each cut with …
        let shared = try show(wide, width: 80)
        #expect(shared.contains("│ id │") && !shared.contains("RECORD"))
        #expect(shared.split(separator: "\n").allSatisfy { $0.count <= 80 }, "\(shared)")
        #expect(shared.contains("a…") && shared.contains("b…") && shared.contains("c…"))
        // Control: a terminal wide enough keeps every value whole.
        let roomy = try show(wide, width: 200)
        #expect(roomy.contains("│ id │") && !roomy.contains("RECORD") && !roomy.contains("…"))
    }
}
