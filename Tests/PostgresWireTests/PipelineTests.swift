import Foundation
import Testing
import TestSupport
@testable import PostgresWire

/// PostgresConnection.pipeline: several statements, one Sync, one round trip.
@Suite struct PipelineTests {
    /// A table of this test's own (temporary: each connection has its own).
    func table(_ connection: PostgresConnection, _ name: String) throws {
        try connection.simpleQuery("CREATE TEMP TABLE \(name) (id int8 PRIMARY KEY, name text)")
    }

    @Test func threeStepsSucceedInOneRoundTrip() throws {
        let connection = try connect()
        try table(connection, "p")
        let steps: [(sql: String, parameters: [PostgresValue])] = [
            ("INSERT INTO p VALUES ($1, $2) RETURNING id", [.integer(1), .text("one")]),
            ("SELECT count(*) FROM p", []),
            ("SELECT name FROM p WHERE id = $1", [.integer(1)]),
        ]
        let syncs = connection.syncsSent, writes = connection.socketWrites
        let results = try connection.pipeline(steps)
        #expect(connection.syncsSent - syncs == 1)
        #expect(connection.socketWrites - writes == 1)
        #expect(results.count == 3)
        #expect(results[0].commandTag == "INSERT 0 1")
        #expect(results[0].rows == [[.integer(1)]])
        #expect(results[1].rows == [[.integer(1)]])
        #expect(results[1].columns.map(\.name) == ["count"])
        #expect(results[2].rows == [[.text("one")]])
        #expect(connection.transactionStatus == .idle)
        // The three were prepared in the pipeline and are cached: the next
        // run only binds and executes them, still in one round trip.
        #expect(connection.preparedStatementCount == 3)
        let again = try connection.pipeline([
            ("INSERT INTO p VALUES ($1, $2) RETURNING id", [.integer(2), .text("two")]),
            ("SELECT count(*) FROM p", []),
            ("SELECT name FROM p WHERE id = $1", [.integer(2)]),
        ])
        #expect(connection.syncsSent - syncs == 2)
        #expect(connection.socketWrites - writes == 2)
        #expect(again.map(\.rows) == [[[.integer(2)]], [[.integer(2)]], [[.text("two")]]])
        #expect(connection.preparedStatementCount == 3)
        // Control: the same three as separate queries are three round trips.
        let before = connection.syncsSent
        for step in steps.dropFirst() { try connection.query(step.sql, step.parameters) }
        try connection.query("SELECT 1 + 1")  // new: Parse/Describe, then Bind/Execute
        #expect(connection.syncsSent - before == 4)
    }

    @Test func middleStepFailsTheThirdDoesNotRunAndSavepointRecovers() throws {
        let connection = try connect()
        try table(connection, "m")
        try connection.query("INSERT INTO m VALUES (1, 'one')")
        try connection.simpleQuery("BEGIN")
        let syncs = connection.syncsSent
        do {
            try connection.pipeline([
                ("SAVEPOINT opsh_statement", []),
                ("INSERT INTO m VALUES ($1, $2)", [.integer(1), .text("duplicate")]),
                ("INSERT INTO m VALUES ($1, $2)", [.integer(99), .text("never")]),
            ])
            Issue.record("the duplicate key was accepted")
        } catch let error as PostgresError {
            #expect(error.step == 1)
            #expect(error.code == "23505")
            #expect(error.sql == "INSERT INTO m VALUES ($1, $2)")
            #expect(error.constraint == "m_pkey")
        }
        #expect(connection.syncsSent - syncs == 1)
        #expect(connection.transactionStatus == .failed)
        #expect { try connection.query("SELECT 1") } throws: { ($0 as? PostgresError)?.code == "25P02" }
        try connection.simpleQuery("ROLLBACK TO SAVEPOINT opsh_statement")
        #expect(connection.transactionStatus == .inTransaction)
        // The third step never ran: its row is not there.
        #expect(try connection.query("SELECT count(*) FROM m WHERE id = $1", [.integer(99)]).scalar == .integer(0))
        // The transaction goes on, with the wrapped statement's next run.
        let results = try connection.pipeline([
            ("SAVEPOINT opsh_statement", []),
            ("INSERT INTO m VALUES ($1, $2)", [.integer(2), .text("two")]),
            ("RELEASE SAVEPOINT opsh_statement", []),
        ])
        #expect(results.map(\.commandTag) == ["SAVEPOINT", "INSERT 0 1", "RELEASE"])
        #expect(connection.transactionStatus == .inTransaction)
        try connection.simpleQuery("COMMIT")
        #expect(connection.transactionStatus == .idle)
        #expect(try connection.query("SELECT id, name FROM m ORDER BY id").rows == [[.integer(1), .text("one")], [.integer(2), .text("two")]])
    }

    @Test func withoutATransactionBlockTheStepsAreOneImplicitTransaction() throws {
        let connection = try connect()
        try table(connection, "i")
        try connection.query("INSERT INTO i VALUES (1, 'one')")
        #expect {
            try connection.pipeline([
                ("INSERT INTO i VALUES ($1, $2)", [.integer(10), .text("ran, then rolled back")]),
                ("INSERT INTO i VALUES ($1, $2)", [.integer(1), .text("duplicate")]),
                ("INSERT INTO i VALUES ($1, $2)", [.integer(11), .text("never ran")]),
            ])
        } throws: { ($0 as? PostgresError)?.step == 1 }
        #expect(connection.transactionStatus == .idle)
        #expect(try connection.query("SELECT id FROM i ORDER BY id").rows == [[.integer(1)]])
    }

    @Test func readOnlyWrapperOutsideATransaction() throws {
        let connection = try connect()
        // Not TEMP: a read-only transaction may write temporary tables.
        try connection.simpleQuery("DROP TABLE IF EXISTS r; CREATE TABLE r (id int8 PRIMARY KEY, name text)")
        try connection.query("INSERT INTO r VALUES (7, 'seven')")
        let wrapped: (String, [PostgresValue]) -> [(sql: String, parameters: [PostgresValue])] = { sql, parameters in
            [("BEGIN READ ONLY", []), ("SAVEPOINT opsh_statement", []), (sql, parameters), ("COMMIT", [])]
        }
        let syncs = connection.syncsSent
        let results = try connection.pipeline(wrapped("SELECT name FROM r WHERE id = $1", [.integer(7)]))
        #expect(results.map(\.commandTag) == ["BEGIN", "SAVEPOINT", "SELECT 1", "COMMIT"])
        #expect(results[2].rows == [[.text("seven")]])
        #expect(connection.transactionStatus == .idle)
        #expect(connection.syncsSent - syncs == 1)
        // A write in it: refused (25006) at step 2, the block is failed, COMMIT never ran.
        do {
            try connection.pipeline(wrapped("INSERT INTO r VALUES ($1, 'x')", [.integer(8)]))
            Issue.record("a write ran in a read-only transaction")
        } catch let error as PostgresError {
            #expect(error.step == 2)
            #expect(error.code == "25006")
        }
        #expect(connection.transactionStatus == .failed)
        try connection.simpleQuery("ROLLBACK")
        #expect(connection.transactionStatus == .idle)
        #expect(try connection.query("SELECT count(*) FROM r").scalar == .integer(1))
    }

    @Test func firstRunInTextAndLaterRunsInBinaryGiveTheSameValues() throws {
        let connection = try connect()
        let sql = "SELECT $1::int8, 0.1::float8, 0.1::float4, 'NaN'::float8, '-Infinity'::float4, true, 7::int2, 8::int4, 12.50::numeric, '\\x00ff'::bytea, NULL::int8, 'é'::text"
        let first = try connection.pipeline([(sql, [.integer(.min)])])  // prepared here: text results
        let second = try connection.pipeline([(sql, [.integer(.min)])])  // cached: binary results
        let query = try connection.query(sql, [.integer(.min)])
        #expect(first[0].rows.count == 1)
        // NaN is not equal to itself: compare the descriptions.
        #expect(first[0].rows.description == second[0].rows.description)
        #expect(second[0].rows.description == query.rows.description)
        #expect(first[0].rows[0][2] == .double(Double(Float(0.1))))
        #expect(first[0].rows[0][0] == .integer(.min))
        #expect(first[0].rows[0][9] == .bytes([0, 0xFF]))
        #expect(first[0].columns == query.columns)
        #expect(connection.preparedStatementCount == 1)
    }

    @Test func aStatementFirstSeenInAPipelineIsPreparedOnceThere() throws {
        let connection = try connect()
        let results = try connection.pipeline([
            ("SELECT $1::int8 * 3", [.integer(1)]),
            ("SELECT $1::int8 * 3", [.integer(2)]),
            ("SELECT $1::int8 * 3", [.integer(3)]),
        ])
        #expect(results.map(\.rows) == [[[.integer(3)]], [[.integer(6)]], [[.integer(9)]]])
        #expect(connection.preparedStatementCount == 1)
        #expect(try connection.query("SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", [.text("SELECT $1::int8 * 3")]).scalar == .integer(1))
        // query() uses it: one round trip (Bind, Execute), no Parse.
        let syncs = connection.syncsSent
        #expect(try connection.query("SELECT $1::int8 * 3", [.integer(4)]).scalar == .integer(12))
        #expect(connection.syncsSent - syncs == 1)
        // A statement whose Parse failed is not cached, nor are the skipped ones after it.
        let count = connection.preparedStatementCount
        #expect { try connection.pipeline([("SELEC 1", []), ("SELECT 'skipped'", [])]) } throws: {
            ($0 as? PostgresError)?.step == 0 && ($0 as? PostgresError)?.code == "42601"
        }
        #expect(connection.preparedStatementCount == count)
        #expect(try connection.pipeline([("SELECT 'skipped'", [])])[0].scalar == .text("skipped"))
    }

    @Test func cacheCapacityHoldsAfterAPipeline() throws {
        let connection = try connect()
        connection.statementCacheCapacity = 2
        let results = try connection.pipeline([("SELECT 1", []), ("SELECT 2", []), ("SELECT 3", []), ("SELECT 1", [])])
        #expect(results.map(\.scalar) == [.integer(1), .integer(2), .integer(3), .integer(1)])
        // SELECT 2 was the least recently used: closed with the next cycle,
        // whose own Parse evicts SELECT 3.
        #expect(connection.preparedStatementCount == 2)
        #expect(try connection.query("SELECT statement FROM pg_prepared_statements ORDER BY statement").rows
            == [[.text("SELECT 1")], [.text("SELECT statement FROM pg_prepared_statements ORDER BY statement")]])
        connection.statementCacheCapacity = 0
        #expect(try connection.pipeline([("SELECT 4", []), ("SELECT 4", [])]).map(\.scalar) == [.integer(4), .integer(4)])
        #expect(connection.preparedStatementCount == 0)
        #expect(try connection.query("SELECT count(*) FROM pg_prepared_statements").scalar == .integer(0))
    }

    // MARK: Stale statements

    @Test func staleFirstStepOutsideATransactionRunsAgainTransparently() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE s0 (id int); INSERT INTO s0 VALUES (1)")
        #expect(try connection.pipeline([("SELECT * FROM s0", []), ("SELECT 2", [])])[0].rows == [[.integer(1)]])
        try connection.simpleQuery("ALTER TABLE s0 ADD COLUMN name text DEFAULT 'x'")
        let syncs = connection.syncsSent
        let results = try connection.pipeline([("SELECT * FROM s0", []), ("SELECT 2", [])])
        #expect(results[0].columns.map(\.name) == ["id", "name"])
        #expect(results[0].rows == [[.integer(1), .text("x")]])
        #expect(results[1].scalar == .integer(2))
        #expect(connection.syncsSent - syncs == 2)  // the refused run and the run again
        // 26000: DEALLOCATE ALL dropped every cached statement, BEGIN READ ONLY's too.
        let wrapped: [(sql: String, parameters: [PostgresValue])] = [("BEGIN READ ONLY", []), ("SELECT count(*) FROM s0", []), ("COMMIT", [])]
        #expect(try connection.pipeline(wrapped)[1].scalar == .integer(1))
        try connection.simpleQuery("DEALLOCATE ALL")
        let prepared = connection.preparedStatementCount
        #expect(prepared >= 3)
        #expect(try connection.pipeline(wrapped)[1].scalar == .integer(1))
        #expect(connection.transactionStatus == .idle)
        // Every statement was forgotten, not only BEGIN READ ONLY's: the
        // run again prepared the three, and the others (SELECT * FROM s0,
        // SELECT 2) are prepared again on their next run.
        #expect(connection.preparedStatementCount == 3)
        #expect(try connection.query("SELECT 2").scalar == .integer(2))
    }

    @Test func deallocateAllInsideATransactionIsSeenAndEveryStatementIsPreparedAgain() throws {
        let connection = try connect()
        let steps: [(sql: String, parameters: [PostgresValue])] = [
            ("SAVEPOINT opsh_statement", []), ("SELECT $1::int8 + 1", [.integer(1)]), ("RELEASE SAVEPOINT opsh_statement", []),
        ]
        try connection.simpleQuery("BEGIN")
        #expect(try connection.pipeline(steps)[1].scalar == .integer(2))
        #expect(connection.preparedStatementCount == 3)
        // The server's tag says the statements are gone: the next pipeline
        // prepares its steps again instead of failing once, which inside a
        // transaction would have cost the transaction.
        try connection.simpleQuery("DEALLOCATE ALL")
        #expect(try connection.pipeline(steps)[1].scalar == .integer(2))
        #expect(connection.transactionStatus == .inTransaction)
        #expect(connection.preparedStatementCount == 3)
        // The same for a DEALLOCATE run in a pipeline of its own.
        #expect(try connection.pipeline([("DEALLOCATE ALL", [])])[0].commandTag == "DEALLOCATE ALL")
        #expect(try connection.pipeline(steps)[1].scalar == .integer(2))
        #expect(connection.transactionStatus == .inTransaction)
        try connection.simpleQuery("COMMIT")
    }

    @Test func staleStatementInsideASavepointIsReportedWithItsStepThenPreparedAgain() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE s1 (id int); INSERT INTO s1 VALUES (1)")
        let steps: [(sql: String, parameters: [PostgresValue])] = [
            ("SAVEPOINT opsh_statement", []), ("SELECT * FROM s1", []), ("RELEASE SAVEPOINT opsh_statement", []),
        ]
        try connection.simpleQuery("BEGIN")
        #expect(try connection.pipeline(steps)[1].rows == [[.integer(1)]])
        try connection.simpleQuery("ALTER TABLE s1 ADD COLUMN name text DEFAULT 'y'")
        do {
            try connection.pipeline(steps)
            Issue.record("the stale statement ran")
        } catch let error as PostgresError {
            #expect(error.step == 1)
            #expect(error.code == "0A000")
            #expect(error.hint?.contains("roll back (to the savepoint) first") == true)
        }
        #expect(connection.transactionStatus == .failed)
        try connection.simpleQuery("ROLLBACK TO SAVEPOINT opsh_statement")
        // Forgotten, so prepared again in the next pipeline; the ALTER TABLE
        // of this transaction still holds.
        let results = try connection.pipeline(steps)
        #expect(results[1].columns.map(\.name) == ["id", "name"])
        #expect(results[1].rows == [[.integer(1), .text("y")]])
        try connection.simpleQuery("COMMIT")
        #expect(connection.transactionStatus == .idle)
    }

    @Test func staleStatementInAReadOnlyWrapperLeavesTheBlockFailed() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE s2 (id int); INSERT INTO s2 VALUES (1)")
        let steps: [(sql: String, parameters: [PostgresValue])] = [
            ("BEGIN READ ONLY", []), ("SAVEPOINT opsh_statement", []), ("SELECT * FROM s2", []), ("COMMIT", []),
        ]
        #expect(try connection.pipeline(steps)[2].rows == [[.integer(1)]])
        try connection.simpleQuery("ALTER TABLE s2 ADD COLUMN name text DEFAULT 'z'")
        #expect { try connection.pipeline(steps) } throws: {
            let error = $0 as? PostgresError
            return error?.step == 2 && error?.code == "0A000"
        }
        #expect(connection.transactionStatus == .failed)
        try connection.simpleQuery("ROLLBACK")
        #expect(try connection.pipeline(steps)[2].rows == [[.integer(1), .text("z")]])
        #expect(connection.transactionStatus == .idle)
    }

    // MARK: Edges

    @Test func emptyPipelineSendsNothing() throws {
        let connection = try connect()
        let syncs = connection.syncsSent
        #expect(try connection.pipeline([]).isEmpty)
        #expect(connection.syncsSent == syncs)
    }

    @Test func refusedBeforeSending() throws {
        let connection = try connect()
        let writes = connection.socketWrites
        #expect { try connection.pipeline([("SELECT 1", []), ("SELECT '\u{0}'", [])]) } throws: { $0 is PostgresClientError }
        let many = [PostgresValue](repeating: .integer(1), count: 65_536)
        #expect { try connection.pipeline([("SELECT 1", []), ("SELECT 1", many)]) } throws: { $0 is PostgresClientError }
        #expect(connection.socketWrites == writes)
        #expect(try connection.pipeline([("SELECT 1", [])])[0].scalar == .integer(1))
    }

    @Test func copyFromStdinIsRefusedAndTheConnectionGoesOn() throws {
        let connection = try connect()
        try connection.simpleQuery("CREATE TEMP TABLE c (id int)")
        #expect { try connection.pipeline([("SELECT 1", []), ("COPY c FROM STDIN", [])]) } throws: {
            ($0 as? PostgresError)?.step == 1
        }
        #expect(connection.transactionStatus == .idle)
        // Anywhere else it is refused before sending: the server would end the session.
        let writes = connection.socketWrites
        #expect { try connection.pipeline([("  copy c FROM STDIN", []), ("SELECT 1", [])]) } throws: {
            ($0 as? PostgresClientError).map { "\($0)".contains("only as its last step") } == true
        }
        #expect(connection.socketWrites == writes)
        #expect(try connection.pipeline([("SELECT 5", []), ("SELECT 6", [])]).map(\.scalar) == [.integer(5), .integer(6)])
        #expect(connection.transactionStatus == .idle)
    }
}
