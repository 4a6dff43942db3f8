import Foundation
import Testing
import LuaRuntime
@testable import Bindings

/// `db`: SQL from Lua on a real database file.
@Suite struct DatabaseModuleTests {
    let test = try! TestSession()

    func makeTable() throws {
        try test.run("db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, data BLOB)')")
    }

    @Test func queryReturnsRowsKeyedByColumn() throws {
        try makeTable()
        try test.run("db.exec('INSERT INTO items (name, price, qty) VALUES (?, ?, ?)', 'bolt', 0.25, 100)")
        try test.run("db.exec('INSERT INTO items (name, price, qty) VALUES (:name, :price, :qty)', {name = 'nut', price = 0.1, qty = 7})")
        let rows = try test.run("local r = db.query('SELECT name, price, qty FROM items ORDER BY id') return r, #r, getmetatable(r).columns")
        #expect(rows[0] == [["name": "bolt", "price": 0.25, "qty": 100], ["name": "nut", "price": 0.1, "qty": 7]])
        #expect(rows[1] == 2)
        #expect(rows[2] == ["name", "price", "qty"])
        #expect(try test.run("return db.value('SELECT count(*) FROM items')") == [2])
        #expect(try test.run("return db.first('SELECT name FROM items WHERE qty > ?', 50).name") == ["bolt"])
        #expect(try test.run("return db.first('SELECT name FROM items WHERE qty > ?', 5000)") == [nil])
    }

    /// A TEMP table lives on the writer's connection: every later call
    /// reaches it, reads included (they were prepared on the read
    /// connection, which has no such table).
    @Test func aTempTableIsSeenByEveryLaterCall() throws {
        try test.run("db.exec('CREATE TEMP TABLE tt (a)')")
        try test.run("db.exec('INSERT INTO tt VALUES (?)', 7)")
        #expect(try test.run("return db.value('SELECT a FROM tt'), #db.query('SELECT * FROM tt'), db.first('SELECT a FROM tt').a") == [7, 1, 7])
        #expect(try test.run("return db.transaction(function() db.exec('INSERT INTO tt VALUES (8)') return db.value('SELECT sum(a) FROM tt') end)") == [15])
        // A table that is nowhere still says so.
        #expect(test.failure("db.value('SELECT * FROM nowhere')") == "test:1: SQL error: no such table: nowhere (in: SELECT * FROM nowhere)")
    }

    /// query() inside db.transaction reads the transaction's own writes.
    @Test func aQueryKeyInsideATransactionSeesItsOwnWrites() throws {
        let counts = try test.run("""
            return db.transaction(function()
              projects.insert{ bundleIdentifier = 'in.tx', name = 'T', gitRepositoryURL = '/t' }
              return #query('projects.all.ids'), query('project."in.tx"').name
            end)
            """)
        #expect(counts == [1, "T"])
    }

    @Test func execReturnsChangesAndLastId() throws {
        try makeTable()
        #expect(try test.run("return db.exec('INSERT INTO items (name) VALUES (?)', 'a')") == [1, 1])
        #expect(try test.run("return db.exec('INSERT INTO items (name) VALUES (?)', 'b')") == [1, 2])
        #expect(try test.run("return (db.exec('UPDATE items SET qty = 1'))") == [2])
        // A script of statements without parameters.
        try test.run("db.exec('CREATE TABLE a (x); CREATE TABLE b (y); INSERT INTO a VALUES (1);')")
        #expect(try test.sqlite3("SELECT count(*) FROM a") == "1")
    }

    @Test func nullIsNilAndTyposAreErrors() throws {
        try makeTable()
        try test.run("db.exec('INSERT INTO items (name, qty) VALUES (?, ?)', 'x', nil)")
        #expect(try test.run("local r = db.first('SELECT name, qty FROM items') return r.qty == nil, r.name") == [true, "x"])
        #expect(test.failure("local r = db.first('SELECT name, qty FROM items') return r.nmae") ==
            "test:1: no column 'nmae' in this row (columns: name, qty)")
        // db.NULL writes NULL from a table of named parameters.
        try test.run("db.exec('UPDATE items SET name = :name', {name = db.NULL})")
        #expect(try test.sqlite3("SELECT name IS NULL FROM items") == "1")
    }

    @Test func integersFloatsAndBlobsSurviveTheRoundTrip() throws {
        try makeTable()
        try test.run("""
            db.exec('INSERT INTO items (id, qty, price, data) VALUES (1, ?, ?, ?)', math.maxinteger, 0.1, '\\0\\255\\1')
            db.exec('INSERT INTO items (id, qty, price, data) VALUES (2, ?, ?, ?)', math.mininteger, 1/0, db.blob('abc'))
            """)
        let values = try test.run("local a, b = db.first('SELECT * FROM items WHERE id = 1'), db.first('SELECT * FROM items WHERE id = 2') return a.qty, a.price, a.data, b.qty, b.price, b.data")
        #expect(values == [.integer(.max), .number(0.1), .bytes([0, 255, 1]), .integer(.min), .number(.infinity), "abc"])
        #expect(try test.sqlite3("SELECT typeof(data) FROM items ORDER BY id") == "blob\nblob")
    }

    @Test func rowsStreamAndCloseOnBreak() throws {
        try makeTable()
        try test.run("db.transaction(function() for i = 1, 1000 do db.exec('INSERT INTO items (qty) VALUES (?)', i) end end)")
        #expect(try test.run("local s = 0 for row in db.rows('SELECT qty FROM items') do s = s + row.qty end return s") == [500500])
        #expect(try test.run("local n = 0 for row in db.rows('SELECT qty FROM items WHERE qty > ?', 990) do n = n + 1 if n == 3 then break end end return n") == [3])
        // Breaking out of one loop closes that loop's cursor, not another's.
        #expect(try test.run("""
            local next1 = db.rows('SELECT qty FROM items ORDER BY qty')
            local a = next1()
            for r in db.rows('SELECT qty FROM items') do break end
            local b = next1()
            return a.qty, b and b.qty
            """) == [1, 2])
        // Nested loops over the same statement.
        #expect(try test.run("local n = 0 for a in db.rows('SELECT qty FROM items WHERE qty <= 3') do for b in db.rows('SELECT qty FROM items WHERE qty <= 3') do n = n + 1 end end return n") == [9])
        #expect(test.failure("for r in db.rows('DELETE FROM items') do end")?.contains("db.rows only reads") == true)
    }

    @Test func transactionsCommitRollBackAndNest() throws {
        try makeTable()
        #expect(test.failure("""
            db.transaction(function()
              db.exec("INSERT INTO items (name) VALUES ('kept?')")
              error('abort')
            end)
            """) == "test:3: abort")
        #expect(try test.sqlite3("SELECT count(*) FROM items") == "0")
        try test.run("""
            db.transaction(function()
              db.exec("INSERT INTO items (name) VALUES ('outer')")
              local ok = pcall(db.transaction, function()
                db.exec("INSERT INTO items (name) VALUES ('inner')")
                error('inner fails')
              end)
              assert(not ok)
              assert(db.value('SELECT count(*) FROM items') == 1, 'reads see the transaction')
            end)
            """)
        #expect(try test.sqlite3("SELECT group_concat(name) FROM items") == "outer")
        #expect(try test.run("return db.transaction(function() return 1, 'two' end)") == [1, "two"])
        #expect(test.failure("db.exec('BEGIN')")?.contains("use db.transaction") == true)
    }

    @Test func sqlErrorsSayWhatAndWhere() throws {
        #expect(test.failure("db.query('SELECT * FROM nope')") == "test:1: SQL error: no such table: nope (in: SELECT * FROM nope)")
        #expect(test.failure("db.query('SELECT ?', 1, 2)") == "test:1: the statement has 1 placeholder but 2 values were given: SELECT ?")
        #expect(test.failure("db.query('SELECT ?', {})") == "test:1: no value for parameter ?1 in the table of parameters (write NULL as db.NULL): SELECT ?")
        #expect(test.failure("db.query('SELECT :id', {ident = 1})") == "test:1: no value for parameter :id in the table of parameters: SELECT :id")
        #expect(test.failure("db.query('SELECT ?', print)") == "test:1: bad argument #2 to 'query' (cannot bind a function to SQL parameter ?1 (encode tables with json.encode))")
        #expect(test.failure("db.query(42)") == "test:1: bad argument #1 to 'query' (string expected, got number)")
        #expect(test.failure("db.query()") == "test:1: bad argument #1 to 'query' (string expected, got no value)")
    }

    @Test func injectionAttemptsAreJustValues() throws {
        try makeTable()
        let hostile = "x'); DROP TABLE items; --"
        try test.run("db.exec('INSERT INTO items (name) VALUES (?)', ...)", [.string(hostile)])
        #expect(try test.sqlite3("SELECT name FROM items") == hostile)
    }

    @Test func dryRunRollsBackAndCounts() throws {
        try makeTable()
        try test.run("db.exec('INSERT INTO items (name) VALUES (?)', 'before')")
        let (_, summary) = try test.session.database.dryRun {
            try test.run("db.exec('INSERT INTO items (name) VALUES (?)', 'new') db.exec('UPDATE items SET qty = 1') db.exec('DELETE FROM items WHERE name = ?', 'before')")
        }
        #expect(summary.tables["items"] == .init(inserted: 1, updated: 2, deleted: 1))
        #expect(try test.run("return opsh.dryRun()") == [false])
        let (flag, _) = try test.session.database.dryRun { try test.run("return opsh.dryRun()") }
        #expect(flag == [true])
        #expect(try test.sqlite3("SELECT group_concat(name) FROM items") == "before")
    }

    @Test func otherProcessesWritesAreSeen() throws {
        try makeTable()
        _ = try test.sqlite3("INSERT INTO items (name) VALUES ('from sqlite3')")
        #expect(try test.run("return db.value('SELECT name FROM items')") == ["from sqlite3"])
    }
}
