import Foundation
import Testing
import TestSupport
@testable import PostgresWire

/// COPY FROM STDIN through ``PostgresConnection/copyIn(_:from:)``, against
/// the real server: the data in pieces, a row the server refuses (named by
/// its line in the error's context, nothing kept, the sending stopped), the
/// client stopping the copy, and the connection going on after each.
@Suite struct CopyInTests {
    @Test func piecesOfDataBecomeRows() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE c (id int8, name text)")
        var next = 1
        let result = try connection.copyIn("COPY c FROM STDIN (FORMAT csv)") { buffer in
            // Pieces that split rows anywhere: the server joins them.
            let rows = (next..<next + 1000).map { "\($0),\"name \($0)\"\n" }.joined()
            buffer.append(contentsOf: rows.utf8.prefix(rows.utf8.count - 3))
            buffer.append(contentsOf: rows.utf8.suffix(3))
            next += 1000
            return next <= 50_000
        }
        #expect(result.commandTag == "COPY 50000")
        #expect(try connection.query("SELECT count(*), sum(id)::int8 FROM c").rows == [[.integer(50_000), .integer(1_250_025_000)]])
    }

    @Test func aRefusedRowNamesItsLineKeepsNothingAndStopsTheSending() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE c (id int8, name text)")
        var pieces = 0
        do {
            try connection.copyIn("COPY c FROM STDIN (FORMAT csv)") { buffer in
                pieces += 1
                buffer.append(contentsOf: (pieces == 1 ? "1,a\n2,b\nthree,c\n" : String(repeating: "4,d\n", count: 10_000)).utf8)
                return pieces < 10_000
            }
            Issue.record("a bad row was accepted")
        } catch let error as PostgresError {
            #expect(error.code == "22P02")
            #expect(error.fields["W"]?.contains("line 3, column id") == true, "\(error.fields)")
        }
        // The server refused at once: far fewer than the 10,000 pieces went out.
        #expect(pieces < 10_000)
        #expect(try connection.query("SELECT count(*) FROM c").scalar == .integer(0))
        // Control: the same copy without the bad row lands.
        try connection.copyIn("COPY c FROM STDIN (FORMAT csv)") { buffer in
            buffer.append(contentsOf: "1,a\n2,b\n".utf8)
            return false
        }
        #expect(try connection.query("SELECT count(*) FROM c").scalar == .integer(2))
    }

    @Test func theClientStoppingTheCopyKeepsNothingAndTheConnectionGoesOn() throws {
        struct Stop: Error {}
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE c (id int8)")
        var calls = 0
        #expect(throws: Stop.self) {
            try connection.copyIn("COPY c FROM STDIN (FORMAT csv)") { buffer in
                calls += 1
                if calls == 3 { throw Stop() }
                buffer.append(contentsOf: "1\n2\n".utf8)
                return true
            }
        }
        #expect(try connection.query("SELECT count(*) FROM c").scalar == .integer(0))
        // Not a COPY FROM STDIN: said so, and the connection goes on.
        #expect { try connection.copyIn("SELECT 1") { _ in false } } throws: { "\($0)".contains("runs a COPY … FROM STDIN") }
        #expect(try connection.query("SELECT 1").scalar == .integer(1))
    }
}
