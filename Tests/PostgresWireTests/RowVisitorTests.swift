import Foundation
import Testing
import TestSupport
@testable import PostgresWire

/// query(_:_:eachRow:) and pipeline(_:eachRow:): rows handed out in place,
/// as they are read.
@Suite struct RowVisitorTests {
    /// What eachRow saw: each row's values (decoded from the bytes in
    /// place) and its raw columns, copied.
    struct Seen {
        var values: [[PostgresValue]] = []
        var raw: [[[UInt8]?]] = []
    }

    func visit(_ connection: PostgresConnection, _ sql: String, _ parameters: [PostgresValue] = []) throws -> (Seen, PostgresResult) {
        var seen = Seen()
        let result = try connection.query(sql, parameters) { row in
            seen.values.append(try row.values())
            var columns: [[UInt8]?] = []
            try row.forEachColumn { index, bytes in
                #expect(index == columns.count)
                columns.append(bytes.map { Array($0) })
            }
            seen.raw.append(columns)
        }
        return (seen, result)
    }

    @Test func rowsAreTheOnesQueryCollects() throws {
        let connection = try connect()
        let sql = """
            SELECT g, 'name' || g AS name, g * 0.5::float8 AS value, CASE WHEN g % 3 = 0 THEN NULL ELSE 'é✓' END AS maybe,
                   (g % 2 = 0) AS even, '\\x00ff'::bytea AS bytes, g::numeric / 4 AS quarter, ''::text AS empty
            FROM generate_series(1::int8, 500) g
            """
        // The first run prepares the statement, the later ones only bind it
        // (binary int8, float8, bool, bytea): both through eachRow.
        for _ in 0..<2 {
            let (seen, result) = try visit(connection, sql)
            #expect(result.rows.isEmpty)
            #expect(result.commandTag == "SELECT 500")
            #expect(result.columns.map(\.name) == ["g", "name", "value", "maybe", "even", "bytes", "quarter", "empty"])
            let collected = try connection.query(sql)
            #expect(seen.values == collected.rows)
            #expect(seen.values[2] == [.integer(3), .text("name3"), .double(1.5), .null, .bool(false), .bytes([0, 0xFF]), .text("0.75000000000000000000"), .text("")])
            // The raw bytes: int8 in binary (big-endian), text as UTF-8, NULL as nil.
            #expect(seen.raw[2][0] == [0, 0, 0, 0, 0, 0, 0, 3])
            #expect(seen.raw[2][1] == Array("name3".utf8))
            #expect(seen.raw[2][3] == nil)
            #expect(seen.raw[0][3] == Array("é✓".utf8))
            #expect(seen.raw[2][7] == [])
        }
        // The layout says what the bytes are.
        var layouts: [PostgresRowLayout] = []
        try connection.query("SELECT 1::int8, 'x'::text, 2.5::float8, 10::numeric") { layouts.append($0.layout) }
        #expect(layouts.first?.columns.map(\.typeOID) == [PostgresType.int8, PostgresType.text, PostgresType.float8, PostgresType.numeric])
        #expect(layouts.first?.binary == [true, false, true, false])
    }

    /// Rows wider than the receive buffer (64 KiB, grown for them) and
    /// many rows across its refills.
    @Test func rowsCrossingTheReceiveBuffer() throws {
        let connection = try connect()
        let (wide, _) = try visit(connection, "SELECT g, repeat(chr(64 + g), 100000 + g) FROM generate_series(1, 40) g")
        #expect(wide.values.count == 40)
        for (index, row) in wide.values.enumerated() {
            let g = index + 1
            #expect(row == [.integer(Int64(g)), .text(String(repeating: Character(Unicode.Scalar(UInt8(64 + g))), count: 100_000 + g))])
        }
        var count = 0
        var sum: Int64 = 0
        try connection.query("SELECT g, repeat('y', g % 50) FROM generate_series(1, 200000) g") { row in
            count += 1
            guard case let .integer(g) = try row.values()[0] else { return }
            sum += g
        }
        #expect(count == 200_000)
        #expect(sum == 200_000 * 200_001 / 2)
    }

    /// A statement that fails after some rows: eachRow saw the rows before
    /// the failure, the error comes after, the connection goes on.
    @Test func failureMidStreamKeepsTheConnection() throws {
        let connection = try connect()
        var seen: [Int64] = []
        #expect {
            try connection.query("SELECT g, 1 / (1000 - g) FROM generate_series(1, 2000) g") { row in
                if case let .integer(g) = try row.values()[0] { seen.append(g) }
            }
        } throws: { ($0 as? PostgresError)?.code == "22012" }
        // Rows 1 to 999 came before the error (the server sends each as it
        // is made).
        #expect(seen == Array(1...999))
        #expect(connection.isOpen)
        #expect(connection.transactionStatus == .idle)
        #expect(try connection.query("SELECT 41 + 1").scalar == .integer(42))
        // The same in a transaction: failed until the ROLLBACK, as always.
        try connection.simpleQuery("BEGIN")
        #expect(throws: PostgresError.self) {
            try connection.query("SELECT 1 / (1000 - g) FROM generate_series(1, 2000) g") { _ in }
        }
        #expect(connection.transactionStatus == .failed)
        try connection.simpleQuery("ROLLBACK")
        #expect(try connection.query("SELECT 'on'").scalar == .text("on"))
    }

    struct Stop: Error, Equatable {}

    /// eachRow throwing: not called again, the rest of the result is read
    /// and dropped, its error is the one thrown, the connection goes on.
    @Test func eachRowThrowingKeepsTheConnection() throws {
        let connection = try connect()
        var calls = 0
        #expect(throws: Stop.self) {
            try connection.query("SELECT g, repeat('z', 1000) FROM generate_series(1, 50000) g") { _ in
                calls += 1
                if calls == 5 { throw Stop() }
            }
        }
        #expect(calls == 5)
        #expect(connection.isOpen)
        #expect(try connection.query("SELECT count(*) FROM generate_series(1, 7)").scalar == .integer(7))
        // Its error comes first when the statement fails too.
        #expect(throws: Stop.self) {
            try connection.query("SELECT 1 / (10 - g) FROM generate_series(1, 20) g") { _ in throw Stop() }
        }
        #expect(try connection.query("SELECT 'still'").scalar == .text("still"))
    }

    @Test func pipelineHandsOutRowsWithTheirStep() throws {
        let connection = try connect()
        for round in 0..<2 {
            // Round 0 prepares the statements in the pipeline (text
            // results), round 1 binds them (binary): the same values.
            var seen: [(Int, [PostgresValue])] = []
            let results = try connection.pipeline([
                ("SELECT g, g * 1.5::float8 FROM generate_series(1, 3) g", []),
                ("SELECT 'x'::text WHERE false", []),
                ("SELECT $1::int8, true", [.integer(.min)]),
            ]) { step, row in seen.append((step, try row.values())) }
            #expect(results.map(\.rows.count) == [0, 0, 0], "round \(round)")
            #expect(results.map(\.commandTag) == ["SELECT 3", "SELECT 0", "SELECT 1"])
            #expect(seen.map(\.0) == [0, 0, 0, 2])
            #expect(seen.map(\.1) == [[.integer(1), .double(1.5)], [.integer(2), .double(3)], [.integer(3), .double(4.5)],
                                      [.integer(.min), .bool(true)]])
        }
        // A failing step after rows: thrown with its step, the connection goes on.
        var rows = 0
        #expect {
            try connection.pipeline([("SELECT g FROM generate_series(1, 5) g", []),
                                     ("SELECT 1 / (3 - g) FROM generate_series(1, 5) g", [])]) { _, _ in rows += 1 }
        } throws: { ($0 as? PostgresError)?.step == 1 }
        #expect(rows == 7)
        #expect(try connection.query("SELECT 1").scalar == .integer(1))
    }
}
