import Foundation
import Testing
import LuaRuntime
@testable import Bindings
import Store

/// The `db` module's C fast path (`CSQLBridge`) takes over a statement
/// from its second run with the same SQL string: every test here runs a
/// call in a loop and expects the later runs to behave exactly as the
/// first (which Swift handles).
@Suite struct SQLFastPathTests {
    let test = try! TestSession()

    init() throws {
        try test.run("db.exec('CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER, flag INTEGER, data BLOB)')")
    }

    @Test func repeatedCallsStoreAndReturnEveryTypeAlike() throws {
        try test.run("""
            db.transaction(function()
              for i = 1, 3 do
                db.exec('INSERT INTO items (name, price, qty, flag, data) VALUES (?, ?, ?, ?, ?)',
                        'n' .. i, i / 4, math.maxinteger - i, i % 2 == 0, '\\0\\255' .. i)
              end
            end)
            for i = 4, 6 do
              db.exec('INSERT INTO items (name, price, qty, flag, data) VALUES (?, ?, ?, ?, ?)', nil, nil, i, false, nil)
            end
            """)
        #expect(try test.sqlite3("SELECT group_concat(typeof(name) || typeof(price) || typeof(qty) || typeof(data) || flag, ' ') FROM items")
            == "textrealintegerblob0 textrealintegerblob1 textrealintegerblob0 nullnullintegernull0 nullnullintegernull0 nullnullintegernull0")
        let rows = try test.run("""
            local got = {}
            for i = 1, 6 do
              local r = db.first('SELECT * FROM items WHERE id = ?', i)
              got[i] = { r.name, r.price, r.qty, r.flag, r.data, db.value('SELECT qty FROM items WHERE id = ?', i) }
            end
            return got
            """)
        let max = Int64.max
        let withValues: [LuaValue] = (1...3).map { i -> LuaValue in
            let name = LuaValue.string("n\(i)")
            let price = LuaValue.number(Double(i) / 4)
            let qty = LuaValue.integer(max - Int64(i))
            let flag = LuaValue.integer(Int64(i % 2 == 0 ? 1 : 0))
            let data = LuaValue.bytes([0, 255, UInt8(48 + i)])
            return .array([name, price, qty, flag, data, qty])
        }
        // {nil, nil, qty, 0, nil, qty}: a table with holes.
        let withNulls: [LuaValue] = (4...6).map { i -> LuaValue in
            .table([.integer(3): .integer(Int64(i)), .integer(4): .integer(0), .integer(6): .integer(Int64(i))])
        }
        #expect(rows[0] == .array(withValues + withNulls))
        // Rows of a repeated query keep their shape: NULL reads as nil, a
        // typo is an error.
        #expect(try test.run("local n = 0 for i = 1, 3 do n = n + #db.query('SELECT * FROM items WHERE qty < ?', 10) end return n") == [9])
        for _ in 0..<2 {
            #expect(test.failure("for i = 1, 3 do local r = db.first('SELECT name, qty FROM items WHERE id = 4') assert(r.name == nil) local _ = r.nmae end")
                == "test:1: no column 'nmae' in this row (columns: name, qty)")
        }
    }

    @Test func aFailingStatementSaysTheSameEveryTimeAndChangesNothing() throws {
        try test.run("db.exec('INSERT INTO items (id, name) VALUES (1, ?)', 'a')")
        let messages = try test.run("""
            local messages = {}
            for i = 1, 3 do
              local ok, message = pcall(function() db.exec('INSERT INTO items (id, name) VALUES (?, ?)', 1, 'again') end)
              messages[#messages + 1] = message
            end
            db.transaction(function()
              for i = 1, 3 do
                local ok, message = pcall(function() db.exec('INSERT INTO items (id, name) VALUES (?, ?)', 1, 'again') end)
                messages[#messages + 1] = message
              end
            end)
            return messages
            """)
        let expected = LuaValue.string("test:3: SQL error: UNIQUE constraint failed: items.id (in: INSERT INTO items (id, name) VALUES (?, ?))")
        let inTransaction = LuaValue.string("test:8: SQL error: UNIQUE constraint failed: items.id (in: INSERT INTO items (id, name) VALUES (?, ?))")
        #expect(messages[0] == [expected, expected, expected, inTransaction, inTransaction, inTransaction])
        #expect(try test.sqlite3("SELECT count(*), group_concat(name) FROM items") == "1|a")
        // A wrong count of values is explained each time (Swift does it).
        for _ in 0..<2 {
            #expect(test.failure("for i = 1, 2 do db.value('SELECT name FROM items WHERE id = ?', 1, 2) end")
                == "test:1: the statement has 1 placeholder but 2 values were given: SELECT name FROM items WHERE id = ?")
        }
    }

    @Test func readsOutsideATransactionSeeEachWriteAtOnce() throws {
        // Each write ends the read snapshot the repeated count shares.
        let counts = try test.run("""
            local counts = {}
            for i = 1, 5 do
              db.exec('INSERT INTO items (name) VALUES (?)', 'x' .. i)
              counts[i] = db.value('SELECT count(*) FROM items')
            end
            return counts
            """)
        #expect(counts[0] == [1, 2, 3, 4, 5])
        // Inside a transaction, the repeated read sees the transaction's
        // own rows; a rollback takes them back.
        #expect(test.failure("""
            db.transaction(function()
              for i = 1, 3 do
                db.exec('INSERT INTO items (name) VALUES (?)', 'y' .. i)
                assert(db.value('SELECT count(*) FROM items') == 5 + i)
              end
              error('undo')
            end)
            """)?.hasSuffix("undo") == true)
        #expect(try test.run("return db.value('SELECT count(*) FROM items')") == [5])
    }

    @Test func anotherProcessesCommitIsSeenOnceTheSnapshotWindowHasPassed() throws {
        try test.run("for i = 1, 3 do db.value('SELECT count(*) FROM items') end")
        _ = try test.sqlite3("INSERT INTO items (name) VALUES ('from outside')")
        Thread.sleep(forTimeInterval: ReadConnection.snapshotWindow * 2)
        #expect(try test.run("local n for i = 1, 3 do n = db.value('SELECT count(*) FROM items') end return n") == [1])
    }

    @Test func namedParametersAndMarkersWorkInALoop() throws {
        let values = try test.run("""
            for i = 1, 3 do
              db.exec('INSERT INTO items (name, qty, data) VALUES (:name, :qty, :data)', { name = 'n' .. i, qty = i, data = db.NULL })
              db.exec('UPDATE items SET data = ? WHERE qty = ?', db.blob('b' .. i), i)
              db.exec('UPDATE items SET name = ? WHERE qty = ?', db.NULL, i)
            end
            return db.value('SELECT count(*) FROM items WHERE name IS NULL AND typeof(data) = ?', 'blob')
            """)
        #expect(values == [3])
    }

    @Test func aDryRunStillCountsEveryRepeatedWrite() throws {
        let (_, summary) = try test.session.database.dryRun {
            try test.run("for i = 1, 4 do db.exec('INSERT INTO items (name) VALUES (?)', 'd' .. i) end")
            #expect(try test.run("return db.value('SELECT count(*) FROM items')") == [4])
        }
        #expect(summary.tables["items"]?.inserted == 4)
        #expect(try test.sqlite3("SELECT count(*) FROM items") == "0")
    }

    /// db.rows makes a row without a NULL as a copy of its loop's template
    /// (opsh_sql.c, "A row as a copy") and a row with one field by field:
    /// both are the table a script has always seen.
    @Test func aLoopsRowsAreTheSameTablesWithOrWithoutNulls() throws {
        try test.run("""
            db.exec("INSERT INTO items (name, price, qty, flag, data) VALUES ('a', 0.5, 1, 1, x'00ff')")
            db.exec("INSERT INTO items (name, price, qty, flag, data) VALUES (NULL, NULL, 2, 0, NULL)")
            db.exec("INSERT INTO items (name, price, qty, flag, data) VALUES ('c', 2.5, 3, 1, x'01')")
            """)
        let result = try test.run("""
            local shown, metatables = {}, {}
            -- `qty` twice: the later column's value, where it is not NULL.
            for row in db.rows('SELECT id, name, qty, data, price AS qty, name AS again FROM items ORDER BY id') do
              local fields = {}
              for key, value in pairs(row) do
                local text = type(value) == 'string' and #value .. ' bytes ' .. value:byte(1) or tostring(value)
                fields[#fields + 1] = key .. '=' .. (math.type(value) or type(value)) .. ' ' .. text
              end
              table.sort(fields)
              row.extra = #row
              row.name = row.name or 'set later'
              shown[#shown + 1] = table.concat(fields, ',') .. ';' .. row.extra .. ' ' .. row.name
              metatables[getmetatable(row)] = true
            end
            local count = 0
            for _ in pairs(metatables) do count = count + 1 end
            return shown, count
            """)
        #expect(result[0] == .array([
            .string("again=string 1 bytes 97,data=string 2 bytes 0,id=integer 1,name=string 1 bytes 97,qty=float 0.5;0 a"),
            .string("id=integer 2,qty=integer 2;0 set later"),
            .string("again=string 1 bytes 99,data=string 1 bytes 1,id=integer 3,name=string 1 bytes 99,qty=float 2.5;0 c"),
        ]))
        #expect(result[1] == 1)
        // A finalizer given to the rows' metatable (after the first row was
        // made, as Lua has it) runs for the rows made after it.
        #expect(try test.run("""
            local finalized = 0
            for row in db.rows('SELECT id FROM items') do
              getmetatable(row).__gc = function() finalized = finalized + 1 end
            end
            collectgarbage() collectgarbage()
            return finalized
            """) == [2])
        #expect(test.failure("for row in db.rows('SELECT id, qty FROM items') do local _ = row.nope end")
            == "test:1: no column 'nope' in this row (columns: id, qty)")
    }

    @Test func rowsStreamFromTheCIterator() throws {
        try test.run("db.transaction(function() for i = 1, 1000 do db.exec('INSERT INTO items (qty) VALUES (?)', i) end end)")
        let result = try test.run("""
            local sum, nested = 0, 0
            for row in db.rows('SELECT qty FROM items WHERE qty <= ?', 10) do
              sum = sum + row.qty
              for inner in db.rows('SELECT qty FROM items WHERE qty <= ?', 3) do nested = nested + inner.qty end
            end
            local broke = 0
            for row in db.rows('SELECT qty FROM items') do broke = broke + 1 if broke == 5 then break end end
            return sum, nested, broke, pcall(function() for row in db.rows('SELECT qty FROM items') do local _ = row.nope end end)
            """)
        #expect(result[0] == 55)
        #expect(result[1] == 60)
        #expect(result[2] == 5)
        #expect(result[3] == false)
        #expect(result[4] == "test:8: no column 'nope' in this row (columns: qty)")
        // A loop still open when its transaction ends is closed there, and
        // reading on says so (it ended quietly before, as if all was read).
        let closed = try test.run("""
            local it
            db.transaction(function() it = db.rows('SELECT qty FROM items') it() end)
            return pcall(it)
            """)
        #expect(closed[0] == false)
        #expect(closed[1] == "db.rows: this loop was closed when the transaction or chunk that opened it ended (opsh keeps no read open past them); run db.rows again")
    }

    @Test func anInterruptStopsALoopOfRepeatedQueries() throws {
        interruptOnArrival(test.session.runtime)
        let error = #expect(throws: LuaError.self) {
            try test.run("arrived() while true do pcall(db.value, 'SELECT count(*) FROM items WHERE qty > ?', 0) end")
        }
        #expect(error?.kind == .interrupted(.interrupted))
        #expect(try test.run("return db.value('SELECT count(*) FROM items WHERE qty > ?', 0)") == [0])
    }
}
