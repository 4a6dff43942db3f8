import Foundation
import Testing
import TestSupport
@testable import PostgresWire

/// A new connection to this test process's throwaway server (Unix socket,
/// trust).
func connect() throws -> PostgresConnection {
    try PostgresConnection(url: try PostgresServer.shared().url)
}

/// Values through the extended protocol, against a real server.
@Suite struct ValueTests {
    @Test func int8ExtremesRoundTripExactly() throws {
        let connection = try connect()
        for value in [Int64.min, Int64.min + 1, -1, 0, 1, 9_007_199_254_740_993, Int64.max - 1, Int64.max] {
            let result = try connection.query("SELECT $1::int8 AS v, ($1::int8)::text AS t", [.integer(value)])
            #expect(result.rows == [[.integer(value), .text(String(value))]])
            #expect(result.columns.map(\.typeOID) == [PostgresType.int8, PostgresType.text])
        }
        // The server's own int8 arithmetic at the edge, read back binary.
        #expect(try connection.query("SELECT 9223372036854775806::int8 + 1").scalar == .integer(.max))
        // Past the edge the server refuses (22003), nothing wraps around.
        #expect { try connection.query("SELECT $1::int8 + 1", [.integer(.max)]) } throws: { ($0 as? PostgresError)?.code == "22003" }
    }

    @Test func byteaWithNULAnd0xFFRoundTrips() throws {
        let connection = try connect()
        let bytes: [UInt8] = [0, 0xFF, 0, 1, 0x7F, 0x80, 0xFE, 0xFF, 0]
        let result = try connection.query("SELECT $1::bytea, length($1::bytea), encode($1::bytea, 'hex')", [.bytes(bytes)])
        #expect(result.rows == [[.bytes(bytes), .integer(9), .text("00ff00017f80feff00")]])
        #expect(try connection.query("SELECT ''::bytea").scalar == .bytes([]))
        // The simple protocol reads bytea's text form (\x…) back to the same bytes.
        #expect(try connection.simpleQuery("SELECT '\\x00ff00'::bytea").first?.scalar == .bytes([0, 0xFF, 0]))
    }

    @Test func nullIsNotTheEmptyString() throws {
        let connection = try connect()
        let result = try connection.query("SELECT $1::text IS NULL, $2::text IS NULL, $1::text, $2::text", [.null, .text("")])
        #expect(result.rows == [[.bool(true), .bool(false), .null, .text("")]])
    }

    @Test func eachKindOfValue() throws {
        let connection = try connect()
        let result = try connection.query(
            "SELECT $1::float8, $2::bool, $3::text, 1.5::float4, 7::int2, 8::int4, 12.50::numeric, '2024-05-06 07:08:09.123456+00'::timestamptz, '{\"a\":1}'::jsonb, 'é✓'::text",
            [.double(0.1), .bool(false), .text("naïve 🚀")])
        #expect(result.rows == [[.double(0.1), .bool(false), .text("naïve 🚀"), .double(1.5), .integer(7), .integer(8),
                                 .text("12.50"), .text("2024-05-06 07:08:09.123456+00"), .text("{\"a\": 1}"), .text("é✓")]])
        #expect(result.columns.map(\.name) == ["float8", "bool", "text", "float4", "int2", "int4", "numeric", "timestamptz", "jsonb", "text"])
        // A text parameter takes the type the statement gives it: here a timestamptz.
        try connection.simpleQuery("CREATE TEMP TABLE ts (at timestamptz)")
        try connection.query("INSERT INTO ts VALUES ($1)", [.text("2024-01-31 12:00:00+00")])
        #expect(try connection.query("SELECT at + interval '1 day' FROM ts").scalar == .text("2024-02-01 12:00:00+00"))
    }

    @Test func rowsAndCommandTags() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE t (id int8 PRIMARY KEY, name text)")
        for id in 1...5 {
            let insert = try connection.query("INSERT INTO t VALUES ($1, $2)", [.integer(Int64(id)), .text("n\(id)")])
            #expect(insert.commandTag == "INSERT 0 1")
        }
        let update = try connection.query("UPDATE t SET name = upper(name) WHERE id > $1", [.integer(2)])
        #expect(update.affectedRows == 3)
        let select = try connection.query("SELECT id, name FROM t ORDER BY id")
        #expect(select.rows.count == 5)
        #expect(select.rows.last == [.integer(5), .text("N5")])
        #expect(select.commandTag == "SELECT 5")
    }

    @Test func simpleQueryRunsSeveralStatements() throws {
        let connection = try connect()
        let results = try connection.simpleQuery("SET application_name = 'wire test'; SELECT 1 AS one, NULL::int AS n; SELECT 'x'")
        #expect(results.count == 3)
        #expect(results[0].commandTag == "SET")
        #expect(results[1].rows == [[.integer(1), .null]])
        #expect(results[2].rows == [[.text("x")]])
        #expect(connection.serverParameters["application_name"] == "wire test")
        #expect(try connection.simpleQuery("").count == 1)
    }

    @Test func startupParameters() throws {
        let connection = try connect()
        #expect(connection.serverParameters["client_encoding"] == "UTF8")
        #expect(connection.serverParameters["DateStyle"]?.hasPrefix("ISO") == true)
        #expect(connection.serverParameters["application_name"] == "opsh")
        #expect(connection.serverVersion != nil)
        let pid = try connection.query("SELECT pg_backend_pid()").scalar
        #expect(pid == .integer(Int64(connection.processID)))
    }

    @Test func noticesAreCollectedNotPrinted() throws {
        let connection = try connect()
        try connection.simpleQuery("DO $$ BEGIN RAISE NOTICE 'hello %', 42; END $$")
        try connection.query("DROP TABLE IF EXISTS no_such_table_here")
        let notices = connection.takeNotices()
        #expect(notices.map(\.message) == ["hello 42", "table \"no_such_table_here\" does not exist, skipping"])
        #expect(notices.first?.severity == "NOTICE")
        #expect(connection.takeNotices().isEmpty)
    }
}

/// Errors: what the server says, where, and the connection after them.
@Suite struct ErrorTests {
    @Test func undefinedTableQuotesTheSQLAndSQLSTATE() throws {
        let connection = try connect()
        #expect {
            try connection.query("SELECT * FROM nope")
        } throws: { error in
            "\(error)" == "ERROR 42P01: relation \"nope\" does not exist (at character 15 of: SELECT * FROM nope)"
        }
    }

    @Test func syntaxErrorHasCodeAndPositionAndTheConnectionGoesOn() throws {
        let connection = try connect()
        do {
            try connection.query("SELECT 1 FROM WHERE x = 1")
            Issue.record("a syntax error was accepted")
        } catch let error as PostgresError {
            #expect(error.code == "42601")
            #expect(error.position == 15)
            #expect(error.sql == "SELECT 1 FROM WHERE x = 1")
            #expect(error.severity == "ERROR")
        }
        // The same connection runs the next statement.
        #expect(try connection.query("SELECT 2").scalar == .integer(2))
        // Positions count characters, not bytes.
        do {
            try connection.query("SELECT 'é✓', nope")
        } catch let error as PostgresError {
            #expect(error.position == 14)
        }
        // An error in the simple protocol too.
        #expect { try connection.simpleQuery("SELECT 1; SELEC 2") } throws: { ($0 as? PostgresError)?.code == "42601" }
        #expect(try connection.simpleQuery("SELECT 3").first?.scalar == .integer(3))
    }

    @Test func errorInsideTransactionFailsItUntilRollback() throws {
        let connection = try connect()
        #expect(connection.transactionStatus == .idle)
        try connection.simpleQuery("BEGIN")
        #expect(connection.transactionStatus == .inTransaction)
        try connection.simpleQuery("SAVEPOINT s")
        #expect { try connection.query("SELECT 1/0") } throws: { ($0 as? PostgresError)?.code == "22012" }
        #expect(connection.transactionStatus == .failed)
        #expect { try connection.query("SELECT 1") } throws: { ($0 as? PostgresError)?.code == "25P02" }
        try connection.simpleQuery("ROLLBACK TO SAVEPOINT s")
        #expect(connection.transactionStatus == .inTransaction)
        #expect(try connection.query("SELECT 1").scalar == .integer(1))
        try connection.simpleQuery("ROLLBACK")
        #expect(connection.transactionStatus == .idle)
    }

    @Test func uniqueViolationNamesItsConstraintAndDetail() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE u (id int PRIMARY KEY)")
        try connection.query("INSERT INTO u VALUES ($1)", [.integer(1)])
        do {
            try connection.query("INSERT INTO u VALUES ($1)", [.integer(1)])
            Issue.record("a duplicate key was accepted")
        } catch let error as PostgresError {
            #expect(error.code == "23505")
            #expect(error.constraint == "u_pkey")
            #expect(error.detail == "Key (id)=(1) already exists.")
            #expect("\(error)".hasSuffix("(in: INSERT INTO u VALUES ($1))\nDETAIL: Key (id)=(1) already exists."))
        }
    }

    @Test func copyFromStdinIsRefusedAndTheConnectionGoesOn() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE c (a int)")
        #expect { try connection.simpleQuery("COPY c FROM STDIN") } throws: { "\($0)".contains("COPY FROM STDIN is not supported") }
        #expect { try connection.query("COPY c FROM STDIN") } throws: { "\($0)".contains("COPY FROM STDIN is not supported") }
        #expect(try connection.query("SELECT count(*) FROM c").scalar == .integer(0))
    }

    @Test func tooManyParametersAreRefusedBeforeSending() throws {
        let connection = try connect()
        let many = [PostgresValue](repeating: .integer(1), count: 65_536)
        #expect { try connection.query("SELECT 1", many) } throws: { "\($0)".contains("at most 65,535") }
        // Control: the most the protocol carries reach the server, which counts them.
        let placeholders = (1...65_535).map { "$\($0)" }.joined(separator: ",")
        let sum = "SELECT sum(x)::int8 FROM unnest(ARRAY[\(placeholders)]::int8[]) x"
        #expect(try connection.query(sum, Array(many.dropLast())).scalar == .integer(65_535))
    }

    @Test func closedConnectionSaysSo() throws {
        let connection = try connect()
        connection.close()
        #expect(!connection.isOpen)
        #expect { try connection.query("SELECT 1") } throws: { "\($0)".contains("the PostgreSQL connection is closed") }
    }

    @Test func serverEndingTheSessionIsReported() throws {
        let connection = try connect()
        let other = try connect()
        try other.query("SELECT pg_terminate_backend($1::int)", [.integer(Int64(connection.processID))])
        #expect { try connection.query("SELECT 1") } throws: { error in
            // FATAL 57P01 if the message arrived first, or the closed socket.
            (error as? PostgresError)?.code == "57P01" || error is PostgresClientError
        }
        #expect(!connection.isOpen)
        // Control: the other connection is fine.
        #expect(try other.query("SELECT 1").scalar == .integer(1))
    }
}

/// The statement cache: prepared once, re-prepared when it goes stale.
@Suite struct StatementCacheTests {
    @Test func sameSQLIsPreparedOnceOnTheServer() throws {
        let connection = try connect()
        for id in 1...10 {
            #expect(try connection.query("SELECT $1::int8 * 2", [.integer(Int64(id))]).scalar == .integer(Int64(id * 2)))
        }
        #expect(connection.preparedStatementCount == 1)
        let onServer = try connection.query("SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", [.text("SELECT $1::int8 * 2")])
        #expect(onServer.scalar == .integer(1))
    }

    @Test func capacityEvictsTheLeastRecentlyUsed() throws {
        let connection = try connect()
        connection.statementCacheCapacity = 2
        try connection.query("SELECT 1")
        try connection.query("SELECT 2")
        try connection.query("SELECT 1")
        try connection.query("SELECT 3")  // evicts SELECT 2
        #expect(connection.preparedStatementCount == 2)
        #expect(try PostgresServer.shared().sql("SELECT 1") == "1")
        let names = try connection.query("SELECT statement FROM pg_prepared_statements ORDER BY statement").rows
        // Preparing this query evicted SELECT 1 (then the least recently used).
        #expect(names == [[.text("SELECT 3")], [.text("SELECT statement FROM pg_prepared_statements ORDER BY statement")]])
        // Off: nothing stays prepared, queries still work.
        connection.statementCacheCapacity = 0
        #expect(try connection.query("SELECT 4").scalar == .integer(4))
        #expect(connection.preparedStatementCount == 0)
        #expect(try connection.query("SELECT count(*) FROM pg_prepared_statements").scalar == .integer(0))
    }

    @Test func alteredTableIsPreparedAgainTransparentlyOutsideATransaction() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE a (id int)")
        try connection.query("INSERT INTO a VALUES (1)")
        #expect(try connection.query("SELECT * FROM a").rows == [[.integer(1)]])
        try connection.simpleQuery("ALTER TABLE a ADD COLUMN name text DEFAULT 'x'")
        // Control: the server itself refuses the old prepared statement (0A000).
        #expect { try connection.simpleQuery("PREPARE p AS SELECT * FROM a; ALTER TABLE a ADD COLUMN more int; EXECUTE p") } throws: {
            ($0 as? PostgresError)?.code == "0A000"
        }
        let result = try connection.query("SELECT * FROM a")
        #expect(result.columns.map(\.name) == ["id", "name"])
        #expect(result.rows == [[.integer(1), .text("x")]])
    }

    @Test func alteredTableInsideATransactionIsReportedThenPreparedAgain() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE b (id int); INSERT INTO b VALUES (1)")
        #expect(try connection.query("SELECT * FROM b").rows == [[.integer(1)]])
        try connection.simpleQuery("BEGIN; ALTER TABLE b ADD COLUMN name text DEFAULT 'y'")
        do {
            try connection.query("SELECT * FROM b")
            Issue.record("the stale statement ran inside the transaction")
        } catch let error as PostgresError {
            #expect(error.code == "0A000")
            #expect(error.message == "cached plan must not change result type")
            #expect(error.hint?.contains("roll back the transaction first") == true)
        }
        try connection.simpleQuery("ROLLBACK; ALTER TABLE b ADD COLUMN name text DEFAULT 'y'")
        #expect(try connection.query("SELECT * FROM b").rows == [[.integer(1), .text("y")]])
    }

    @Test func discardAllIsSurvived() throws {
        let connection = try connect()
        #expect(try connection.query("SELECT 5").scalar == .integer(5))
        try connection.simpleQuery("DEALLOCATE ALL")
        #expect(try connection.query("SELECT 5").scalar == .integer(5))
    }

    @Test func largeResultsAndWideValues() throws {
        let connection = try connect()
        let result = try connection.query("SELECT g, repeat('x', 1000) FROM generate_series(1, 20000) g")
        #expect(result.rows.count == 20000)
        #expect(result.rows[19999][0] == .integer(20000))
        let big = String(repeating: "abcdefgh", count: 200_000)
        #expect(try connection.query("SELECT $1::text", [.text(big)]).scalar == .text(big))
    }
}
