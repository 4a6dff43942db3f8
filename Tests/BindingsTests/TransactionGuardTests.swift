import Foundation
import GRDBSQLite
import LuaRuntime
import Testing
@testable import Bindings
import Store

/// SQL from a script never begins, ends or releases opsh's transactions,
/// whatever its spelling (issue 13, items 1 and 2; ARCHITECTURE.md,
/// decision 5).
@Suite struct TransactionGuardTests {
    let test = try! TestSession()

    /// Spellings of transaction control: the first word, comments, case,
    /// synonyms and trailing separators must not matter.
    static let attacks = [
        "COMMIT", "/* */ COMMIT", "-- why not\nCOMMIT", "  \n\tcommit;", "COMMIT TRANSACTION", "END",
        "eNd TrAnSaCtIoN", "ROLLBACK", "/*x*/rollback transaction", "SAVEPOINT x", "RELEASE x",
        "RELEASE SAVEPOINT x", "ROLLBACK TO x", "BEGIN", "begin immediate", "BEGIN EXCLUSIVE TRANSACTION",
    ]

    /// Every way SQL text reaches SQLite from Lua. `%s` is the SQL.
    static let entryPoints = [
        "db.exec(%s)", "db.query(%s)", "db.first(%s)", "db.value(%s)",
        "for _ in db.rows(%s) do end",
        "db.exec('UPDATE t SET x = 3; ' .. %s)",       // a script of several statements
        "watch(%s, function() end)",
    ]

    func prepareTable() throws {
        try test.run("db.exec('CREATE TABLE t (x)'); db.exec('INSERT INTO t VALUES (1)')")
    }

    /// Inside db.transaction: delete, try the attack, then fail. The delete
    /// must be rolled back and the attack refused with the reason.
    func attempt(_ entry: String, _ sql: String, thenFail: Bool = true) throws -> (refusal: String?, rows: Int64?) {
        let call = entry.replacingOccurrences(of: "%s", with: "...")
        let results = try test.run("""
            local sql = ...
            local ok, err = pcall(db.transaction, function()
              db.exec('DELETE FROM t')
              local run = load([[return function(...) \(call) end]])()
              local ran, why = pcall(run, sql)
              if not ran then error(why, 0) end
              if \(thenFail) then error('later', 0) end
            end)
            return ok and nil or err, db.value('SELECT count(*) FROM t')
            """, [.string(sql)])
        guard case let .integer(rows) = results[1] else { return (results[0].stringValue, nil) }
        return (results[0].stringValue, rows)
    }

    @Test(arguments: entryPoints)
    func everyEntryPointRefusesEverySpelling(entry: String) throws {
        try prepareTable()
        // watch takes SQL only when it reads as a query (else a query key),
        // so its attacks come after one.
        let attacks = entry.hasPrefix("watch") ? Self.attacks.map { "SELECT x FROM t; " + $0 } : Self.attacks
        for attack in attacks {
            let (refusal, rows) = try attempt(entry, attack)
            if entry.hasPrefix("watch") {
                #expect(refusal?.contains("in watch(") == true, "\(attack.debugDescription): \(refusal ?? "nil")")
            } else {
                #expect(refusal?.contains("transaction control (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE) is not run through db") == true,
                        "\(entry) with \(attack.debugDescription): \(refusal ?? "nil")")
            }
            #expect(rows == 1, "\(entry) with \(attack.debugDescription) kept the delete")
        }
        // Control: the same route with a harmless statement runs, and the
        // delete lands when nothing fails.
        let harmless = entry.contains("watch") || entry.contains("rows") || entry.contains("query")
            || entry.contains("first") || entry.contains("value") ? "SELECT x FROM t" : "UPDATE t SET x = 2"
        let (refusal, rows) = try attempt(entry, harmless, thenFail: false)
        #expect(refusal == nil)
        #expect(rows == 0)
    }

    @Test func aDryRunCannotCommitItsWrites() throws {
        try prepareTable()
        // The session's dry run is what --dry-run runs a script in.
        #expect(throws: (any Error).self) {
            _ = try test.session.database.dryRun {
                try test.run("db.exec('DELETE FROM t'); db.exec('DELETE FROM t; COMMIT')")
            }
        }
        #expect(try test.sqlite3("SELECT count(*) FROM t") == "1")
        // Control: the dry run itself works and reports the delete.
        let (_, summary) = try test.session.database.dryRun { try test.run("db.exec('DELETE FROM t')") }
        #expect(summary.tables["t"]?.deleted == 1)
        #expect(try test.sqlite3("SELECT count(*) FROM t") == "1")
    }

    /// Belt and braces: if the transaction was ended behind opsh's back
    /// (here by Swift on the raw connection, which the guard cannot stop),
    /// the dry run and db.transaction say so instead of "rolled back".
    @Test func aTransactionEndedBehindOpshsBackIsReported() throws {
        try prepareTable()
        let database = test.database
        #expect(throws: TransactionLost.self) {
            _ = try database.dryRun {
                try test.run("db.exec('DELETE FROM t')")
                sqlite3_exec(database.transactionConnection!.handle, "COMMIT", nil, nil, nil)
            }
        }
        #expect(try test.sqlite3("SELECT count(*) FROM t") == "0")
        try test.run("db.exec('INSERT INTO t VALUES (1)')")
        #expect(throws: TransactionLost.self) {
            try database.transaction {
                sqlite3_exec(database.transactionConnection!.handle, "COMMIT", nil, nil, nil)
            }
        }
        // Control: untouched, both end normally.
        _ = try database.dryRun { try test.run("db.exec('DELETE FROM t')") }
        _ = try database.transaction { try test.run("db.exec('INSERT INTO t VALUES (2)')") }
        #expect(try test.sqlite3("SELECT count(*) FROM t") == "2")
    }

    @Test func transactionReraisesTheOriginalErrorValue() throws {
        let results = try test.run("""
            local value = { code = 42 }
            local ok, err = pcall(db.transaction, function() error(value) end)
            local ok2, err2 = pcall(db.transaction, function() db.transaction(function() error(value) end) end)
            local ok3, err3 = pcall(db.transaction, function() error(7) end)
            local ok4, err4 = pcall(db.transaction, function() error() end)
            return ok, err == value, err.code, ok2, err2 == value, err3, math.type(err3), ok4, err4 == nil
            """)
        #expect(results == [false, true, 42, false, true, 7, "integer", false, true])
        // A string error still says where it was raised.
        #expect(test.failure("db.transaction(function() error('boom') end)")?.hasPrefix("test:1: boom") == true)
    }

    // MARK: The property: SQLite's authorizer as the oracle

    /// Strings built from the pieces of transaction control and harmless
    /// statements, with comments, case and separators. The oracle is a
    /// raw connection whose authorizer records SQLITE_TRANSACTION and
    /// SQLITE_SAVEPOINT: a mechanism independent of the guard's bytecode
    /// check. Whatever the oracle calls control must be refused, and
    /// opsh's transaction must hold after every string.
    @Test func generatedStringsNeverEndOpshsTransaction() throws {
        try prepareTable()
        let oracle = try AuthorizerOracle()
        var generator = SeededGenerator(seed: UInt64(ProcessInfo.processInfo.environment["OPSH_GUARD_SEED"] ?? "") ?? 20261124)
        let count = Int(ProcessInfo.processInfo.environment["OPSH_GUARD_CASES"] ?? "") ?? 400
        var controls = 0
        var harmless = 0
        for _ in 0..<count {
            let sql = Self.generate(&generator)
            let verdict = oracle.classify(sql)
            let results = try test.run("""
                local sql = ...
                local outcome
                pcall(db.transaction, function()
                  db.exec('INSERT INTO t VALUES (100)')
                  local ok, err = pcall(db.exec, sql)
                  outcome = ok and 'ran' or err
                  -- still inside opsh's transaction: this row and the one above go
                  db.exec('INSERT INTO t VALUES (101)')
                  error('roll back', 0)
                end)
                return outcome, db.value('SELECT count(*) FROM t WHERE x >= 100'), db.inTransaction()
                """, [.string(sql)])
            let outcome = results[0].stringValue ?? ""
            #expect(results[1] == 0, "\(sql.debugDescription) kept rows: opsh's transaction was ended")
            #expect(results[2] == false)
            switch verdict {
            case .control:
                controls += 1
                #expect(outcome.contains("transaction control"), "\(sql.debugDescription) ran: \(outcome)")
            case .harmless:
                harmless += 1
                #expect(outcome == "ran", "\(sql.debugDescription) was refused: \(outcome)")
            case .invalid:
                #expect(outcome != "ran", "\(sql.debugDescription) does not compile, yet ran")
            }
            // Whatever ran must not have left rows either.
            try test.run("db.exec('DELETE FROM t WHERE x <> 1')")
        }
        #expect(controls > count / 4)
        #expect(harmless > count / 10)
    }

    static let controlPieces = [
        ["BEGIN"], ["BEGIN", "DEFERRED"], ["BEGIN", "IMMEDIATE", "TRANSACTION"], ["COMMIT"], ["COMMIT", "TRANSACTION"],
        ["END"], ["END", "TRANSACTION"], ["ROLLBACK"], ["ROLLBACK", "TRANSACTION"], ["ROLLBACK", "TO", "sp"],
        ["ROLLBACK", "TRANSACTION", "TO", "SAVEPOINT", "sp"], ["SAVEPOINT", "sp"], ["RELEASE", "sp"], ["RELEASE", "SAVEPOINT", "sp"],
    ]
    static let harmlessPieces = [
        ["SELECT", "1"], ["SELECT", "x", "FROM", "t"], ["UPDATE", "t", "SET", "x", "=", "x"],
        ["SELECT", "'COMMIT'"], ["SELECT", "1", "AS", "\"end\""], ["EXPLAIN", "COMMIT"], ["EXPLAIN", "SAVEPOINT", "sp"],
    ]
    static let gaps = [" ", "  ", "\n", "\t", " /* COMMIT */ ", "/**/", " -- END\n", "\r\n"]

    static func generate(_ generator: inout SeededGenerator) -> String {
        var statements: [String] = []
        for _ in 0..<Int.random(in: 1...3, using: &generator) {
            let pieces = Bool.random(using: &generator) ? controlPieces.randomElement(using: &generator)!
                : harmlessPieces.randomElement(using: &generator)!
            var text = Bool.random(using: &generator) ? gaps.randomElement(using: &generator)! : ""
            for (index, piece) in pieces.enumerated() {
                if index > 0 { text += gaps.randomElement(using: &generator)! }
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: text += piece.lowercased()
                case 1: text += piece
                default: text += String(piece.enumerated().map { $0.offset % 2 == 0 ? Character($0.element.uppercased()) : Character($0.element.lowercased()) })
                }
            }
            statements.append(text)
        }
        let separator = [";", "; ", ";\n", " ;-- x\n"].randomElement(using: &generator)!
        return statements.joined(separator: separator) + (Bool.random(using: &generator) ? ";" : "")
    }
}

/// The property test's oracle: SQLite's authorizer on a connection of its
/// own, compiling each statement of a string in turn.
final class AuthorizerOracle {
    enum Verdict { case control, harmless, invalid }
    private let handle: OpaquePointer
    private var sawControl = false

    init() throws {
        var handle: OpaquePointer?
        guard sqlite3_open_v2(":memory:", &handle, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK, let handle else {
            throw SQLiteOracleError()
        }
        self.handle = handle
        sqlite3_exec(handle, "CREATE TABLE t (x)", nil, nil, nil)
        sqlite3_set_authorizer(handle, { context, action, _, _, _, _ in
            if action == SQLITE_TRANSACTION || action == SQLITE_SAVEPOINT {
                Unmanaged<AuthorizerOracle>.fromOpaque(context!).takeUnretainedValue().sawControl = true
            }
            return SQLITE_OK
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { sqlite3_close_v2(handle) }

    /// Control if any statement of `sql` is; invalid if one fails to
    /// compile before any is control.
    func classify(_ sql: String) -> Verdict {
        sql.withCString { start in
            var cursor: UnsafePointer<CChar>? = start
            while let current = cursor, current.pointee != 0 {
                sawControl = false
                var statement: OpaquePointer?
                var tail: UnsafePointer<CChar>?
                let code = sqlite3_prepare_v2(handle, current, -1, &statement, &tail)
                // EXPLAIN COMMIT is compiled (so authorized) but never run.
                let explains = statement.map { sqlite3_stmt_isexplain($0) != 0 } ?? false
                sqlite3_finalize(statement)
                if sawControl && !explains { return .control }
                if code != SQLITE_OK { return .invalid }
                cursor = tail
            }
            return .harmless
        }
    }
}

struct SQLiteOracleError: Error {}
