import Foundation
import Testing

/// A `db.rows` loop whose script keeps its rows is refused at
/// `--memory-limit` with the limit's own words, on both engines (README:
/// the process stays within its own size plus twice the limit). The table
/// that keeps them is grown before the loop, so that the rows themselves
/// pass the limit: no allocation of the script's own would fail first.
@Suite struct RowsLoopMemoryLimitTests {
    static let rows = 400_000

    func script(_ engine: Engine) -> String {
        let sql = engine == .sqlite
            ? "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(Self.rows)) SELECT x AS id, printf('%0100d', x) AS body FROM c"
            : "SELECT x AS id, lpad(x::text, 100, '0') AS body FROM generate_series(1, \(Self.rows)) AS x"
        return """
            local kept = {}
            for i = 1, \(Self.rows) do kept[i] = false end
            local n = 0
            local ok, err = pcall(function()
              for row in db.rows("\(sql)") do n = n + 1; kept[n] = row end
            end)
            print(ok, n, err)
            """
    }

    @Test(arguments: Engine.allCases)
    func rowsKeptFromADbRowsLoopAreRefusedAtTheLimit(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let limit = 16
        let limited = try sandbox.opsh(["--memory-limit", "\(limit)", "-e", script(engine)], on: database)
        #expect(limited.status == 0, "\(limited.stderr)")
        #expect(limited.stdout.hasPrefix("false\t"), "\(limited.stdout)")
        #expect(limited.stdout.contains("not enough memory (the memory limit is \(limit << 20) bytes)"), "\(limited.stdout)")
        if engine == .sqlite {
            // SQLite's rows are made by the loop's iterator itself
            // (CSQLBridge's rows_next), which checks the limit once a row;
            // PostgreSQL's come in chunks, refused as a chunk is made.
            #expect(limited.stdout.contains("the rows of this query would pass it"), "\(limited.stdout)")
        }
        // Control: without the limit the same loop keeps every row.
        let free = try sandbox.opsh(["-e", script(engine)], on: database)
        #expect(free.status == 0, "\(free.stderr)")
        #expect(free.stdout.hasPrefix("true\t\(Self.rows)\t"), "\(free.stdout)")
    }
}
