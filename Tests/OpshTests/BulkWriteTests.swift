import Foundation
import Testing

/// Bulk writes through the real executable (issue 25, item 8): `db.copy`
/// (COPY FROM STDIN on PostgreSQL, prepared INSERTs in one write on
/// SQLite) lands the same rows on both engines, all or none, under the
/// session's rules; `db.send` pipelines a transaction's writes on
/// PostgreSQL, and a failure among them names the write and where the
/// script sent it, with nothing after it kept.
@Suite struct BulkWriteTests {
    static let table = "db.exec('CREATE TABLE events (id integer PRIMARY KEY, name text, n integer)')"

    @Test(arguments: Engine.allCases)
    func copyWritesTheSameRowsFromAFileAndFromLua(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let csv = try sandbox.script("events.csv", "id,name,n\n1,plain,10\n2,\"with, comma and \"\"quote\"\"\",20\n3,,\n4,\"\",40\n")
        let result = try sandbox.opsh(["-e", """
            \(Self.table)
            local a = db.copy('events', '\(csv)', { format = 'csv', header = true })
            local b = db.copy('events', { {5, 'five', 50}, {6, db.NULL, 60} }, { columns = {'id', 'name', 'n'} })
            local c = db.copy('events', { { id = 7, name = 'seven' }, { id = 8, name = 'eight' } })
            return a + b + c
            """], on: database)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "8\n", "\(result.stdout)")
        let rows = try database.sql("SELECT id, coalesce(name, '<null>'), coalesce(n, -1) FROM events ORDER BY id")
        #expect(rows == """
            1|plain|10
            2|with, comma and "quote"|20
            3|<null>|-1
            4||40
            5|five|50
            6|<null>|60
            7|seven|-1
            8|eight|-1
            """, "\(rows)")
    }

    /// The wrong number of fields on a line of the file, a value the column
    /// does not take, and a Lua row too short: each names the line (or
    /// the row) and the column, and nothing of that copy lands. (SQLite
    /// refuses a wrong type only in a STRICT table, so the table is one
    /// there.)
    @Test(arguments: Engine.allCases)
    func aBadRowNamesItsLineAndColumnAndNothingLands(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let strict = engine == .sqlite ? " STRICT" : ""
        let made = try sandbox.opsh(["-e", "db.exec('CREATE TABLE events (id integer PRIMARY KEY, name text, n integer)\(strict)')"],
                                    on: database)
        #expect(made.status == 0, "\(made.stderr)")
        let short = try sandbox.script("short.csv", "id,name,n\n1,a,10\n2,b\n3,c,30\n")
        let wrongType = try sandbox.script("type.csv", "id,name,n\n1,a,10\n2,b,20\n3,c,lots\n")
        let good = try sandbox.script("good.csv", "id,name,n\n1,a,10\n2,b,20\n3,c,30\n")

        let missing = try sandbox.opsh(["-e", "db.copy('events', '\(short)', { header = true })"], on: database)
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("db.copy into events: line 3 of \(short)"), "\(missing.stderr)")
        #expect(missing.stderr.contains("missing data for column \"n\""), "\(missing.stderr)")
        #expect(missing.stderr.contains("nothing was copied"), "\(missing.stderr)")
        #expect(try database.count("events") == 0)

        let typed = try sandbox.opsh(["-e", "db.copy('events', '\(wrongType)', { header = true })"], on: database)
        #expect(typed.status == 1)
        #expect(typed.stderr.contains("db.copy into events: line 4 of \(wrongType)"), "\(typed.stderr)")
        #expect(typed.stderr.contains(engine == .sqlite ? "INTEGER column events.n" : "column n: invalid input syntax for type integer"),
                "\(typed.stderr)")
        #expect(try database.count("events") == 0)

        let row = try sandbox.opsh(["-e", "db.copy('events', { {1, 'a', 10}, {2, 'b', 20, 'extra'} }, { columns = {'id', 'name', 'n'} })"],
                                   on: database)
        #expect(row.status == 1)
        #expect(row.stderr.contains("bad argument #2 to 'copy' (row 2: 4 values for 3 columns (id, name, n))"), "\(row.stderr)")
        let value = try sandbox.opsh(["-e", "db.copy('events', { {1, 'a', 10}, {2, 'b', {}} }, { columns = {'id', 'name', 'n'} })"],
                                     on: database)
        #expect(value.status == 1)
        #expect(value.stderr.contains("row 2, column n"), "\(value.stderr)")
        #expect(try database.count("events") == 0)

        // Control: the same file, right, lands whole.
        let control = try sandbox.opsh(["-e", "return db.copy('events', '\(good)', { header = true })"], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try database.count("events") == 3)
    }

    /// A copy is a write as any other: refused by `--read-only`, reported
    /// and not kept by `--dry-run`, counted against `--max-changes`, and
    /// no file is read in the sandbox; each with its control.
    @Test(arguments: Engine.allCases)
    func copyKeepsTheSessionsRules(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        #expect(try sandbox.opsh(["-e", Self.table], on: database).status == 0)
        let copy = "return db.copy('events', { {1, 'a', 10}, {2, 'b', 20}, {3, 'c', 30} }, { columns = {'id', 'name', 'n'} })"

        let readOnly = try sandbox.opsh(["--read-only", "-e", copy], on: database)
        #expect(readOnly.status != 0)
        #expect(readOnly.stderr.contains(engine == .sqlite ? "readonly database" : "read-only transaction"), "\(readOnly.stderr)")
        #expect(try database.count("events") == 0)

        let dry = try sandbox.opsh(["--dry-run", "-e", copy], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("events: 3 inserted, 0 updated, 0 deleted"), "\(dry.stderr)")
        #expect(try database.count("events") == 0)

        let capped = try sandbox.opsh(["--max-changes", "2", "-e", copy], on: database)
        #expect(capped.status == 1)
        #expect(capped.stderr.contains("more than its limit of 2"), "\(capped.stderr)")
        #expect(try database.count("events") == 0)

        // The same from a CSV file (its rows stepped outside GRDB on SQLite).
        let rows = try sandbox.script("three.csv", "1,a,10\n2,b,20\n3,c,30\n")
        let copyFile = "return db.copy('events', '\(rows)', { columns = {'id', 'name', 'n'} })"
        let dryFile = try sandbox.opsh(["--dry-run", "-e", copyFile], on: database)
        #expect(dryFile.status == 0 && dryFile.stderr.contains("events: 3 inserted, 0 updated, 0 deleted"), "\(dryFile.stderr)")
        let cappedFile = try sandbox.opsh(["--max-changes", "2", "-e", copyFile], on: database)
        #expect(cappedFile.status == 1 && cappedFile.stderr.contains("more than its limit of 2"), "\(cappedFile.stderr)")
        #expect(try database.count("events") == 0)

        let file = try sandbox.script("events.csv", "1,a,10\n")
        let sandboxed = try sandbox.opsh(["--sandbox", "-e", "return db.copy('events', '\(file)')"], on: database)
        #expect(sandboxed.status == 1)
        #expect(sandboxed.stderr.contains("no files in the sandbox"), "\(sandboxed.stderr)")

        let control = try sandbox.opsh(["--max-changes", "3", "-e", copy], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "3\n")
        #expect(try database.count("events") == 3)
    }

    /// `telemetry.insertMany` is one COPY on PostgreSQL (one prepared
    /// INSERT stepped per row on SQLite) under the session's rules as
    /// `db.copy`: refused by `--read-only` (the server names the COPY),
    /// reported and not kept by `--dry-run`, counted against
    /// `--max-changes`; invalid JSON is named as before and nothing lands.
    /// Control: the same rows land, their values as given (text with
    /// quotes, commas and line breaks, the empty string beside NULL, a
    /// real to its last bit).
    @Test(arguments: Engine.allCases)
    func telemetryInsertManyKeepsTheSessionsRules(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let insert = #"""
            return telemetry.insertMany{
              { event = 'a', properties = [[{"s": "x, \"y\"\nz"}]], session_id = '', created_at = 0.1 + 0.2 },
              { event = 'b,"c"\r\nd', created_at = 1700000000.123456 },
              { event = 'e', properties = '[]', session_id = 's1', created_at = 3 } }
            """#

        let readOnly = try sandbox.opsh(["--read-only", "-e", insert], on: database)
        #expect(readOnly.status == 1)
        #expect(readOnly.stderr.contains(engine == .sqlite ? "telemetry: attempt to write a readonly database"
                                         : "cannot execute COPY FROM in a read-only transaction"), "\(readOnly.stderr)")
        #expect(try database.count("telemetry") == 0)

        let dry = try sandbox.opsh(["--dry-run", "-e", insert], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry: 3 inserted, 0 updated, 0 deleted"), "\(dry.stderr)")
        #expect(try database.count("telemetry") == 0)

        let capped = try sandbox.opsh(["--max-changes", "2", "-e", insert], on: database)
        #expect(capped.status == 1)
        #expect(capped.stderr.contains("more than its limit of 2"), "\(capped.stderr)")
        #expect(try database.count("telemetry") == 0)

        let badJSON = try sandbox.opsh(["-e", "telemetry.insertMany{ { event = 'a' }, { event = 'b', properties = '{}' }, { event = 'c', properties = '{nope' } }"],
                                       on: database)
        #expect(badJSON.status == 1)
        #expect(badJSON.stderr.contains("invalid value for telemetry.properties: not valid JSON: {nope"), "\(badJSON.stderr)")
        #expect(try database.count("telemetry") == 0)

        let control = try sandbox.opsh(["--max-changes", "3", "-e", insert], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "3\n", "\(control.stdout)")
        #expect(try database.count("telemetry") == 3)
        // The values, written outside a --max-changes run (SQLite's counted
        // path writes records, whose dates are rounded to Foundation's).
        try database.sql("DELETE FROM telemetry")
        let plain = try sandbox.opsh(["-e", insert], on: database)
        #expect(plain.status == 0, "\(plain.stderr)")
        let read = try sandbox.opsh(["-e", #"""
            local rows = db.query('SELECT event, properties, session_id, created_at FROM telemetry ORDER BY id')
            print(#rows, rows[1].event == 'a', rows[1].properties == [[{"s": "x, \"y\"\nz"}]], rows[1].session_id == '',
                  rows[1].created_at == 0.1 + 0.2)
            print(rows[2].event == 'b,"c"\r\nd', rows[2].properties == nil, rows[2].session_id == nil,
                  rows[2].created_at == 1700000000.123456)
            print(rows[3].properties == '[]', rows[3].session_id == 's1', rows[3].created_at == 3)
            """#], on: database)
        #expect(read.status == 0, "\(read.stderr)")
        #expect(read.stdout == "3\ttrue\ttrue\ttrue\ttrue\ntrue\ttrue\ttrue\ttrue\ntrue\ttrue\ttrue\n", "\(read.stdout)")
    }

    /// `db.send` in a transaction: every row lands, and `--max-changes`
    /// counts what the pipelined batches wrote (with its control).
    @Test(arguments: Engine.allCases)
    func sentWritesLandAndCountAgainstTheCap(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        #expect(try sandbox.opsh(["-e", Self.table], on: database).status == 0)
        let loop = """
            db.transaction(function()
              for i = 1, 2500 do db.send('INSERT INTO events (id, name, n) VALUES (?, ?, ?)', i, 'e' .. i, i % 7) end
            end)
            return db.value('SELECT count(*) FROM events')
            """
        let capped = try sandbox.opsh(["--max-changes", "2000", "-e", loop], on: database)
        #expect(capped.status == 1)
        #expect(capped.stderr.contains("more than its limit of 2000"), "\(capped.stderr)")
        #expect(try database.count("events") == 0)
        let control = try sandbox.opsh(["--max-changes", "2500", "-e", loop], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "2500\n")
        #expect(try database.sql("SELECT sum(n) FROM events") == String((1...2500).reduce(0) { $0 + $1 % 7 }))
    }

    /// PostgreSQL only: there `db.send` inside a transaction does not wait
    /// for the server, so a failing write is raised later (SQLite runs each
    /// write in the process at once, and raises at the call). The error,
    /// raised at the end of the transaction here, names the write's SQL and
    /// the line of the script that sent it; nothing of the transaction is
    /// kept. Control: the same loop without the duplicate lands whole.
    @Test func aFailingPipelinedWriteNamesItsLineAndNothingAfterItCounts() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        #expect(try sandbox.opsh(["-e", Self.table], on: database).status == 0)
        func loop(duplicateAt: Int) -> String {
            """
            db.transaction(function()
              for i = 1, 3000 do
                local id = i == \(duplicateAt) and 1 or i
                db.send('INSERT INTO events (id, name, n) VALUES (?, ?, ?)', id, 'e' .. i, i)
              end
            end)
            """
        }
        let script = try sandbox.script("load.lua", loop(duplicateAt: 1500))
        let failed = try sandbox.opsh(["run", script], on: database)
        #expect(failed.status == 1)
        // (Lua shortens a long chunk name from its start: the file's name and line stay.)
        #expect(failed.stderr.contains("/load.lua:4 failed"), "\(failed.stderr)")
        #expect(failed.stderr.contains(": the write sent at "), "\(failed.stderr)")
        #expect(failed.stderr.contains("duplicate key value violates unique constraint"), "\(failed.stderr)")
        #expect(failed.stderr.contains("INSERT INTO events (id, name, n)"), "\(failed.stderr)")
        #expect(failed.stderr.contains("Key (id)=(1) already exists"), "\(failed.stderr)")
        #expect(try database.count("events") == 0)
        let control = try sandbox.opsh(["run", try sandbox.script("control.lua", loop(duplicateAt: 0))], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try database.count("events") == 3000)
    }

    /// PostgreSQL only (as above): a script that catches the failure goes
    /// on with the writes sent before the failed one kept and none of
    /// those sent after it (up to where it was raised); the next read
    /// raises it at the latest, and what is sent after that counts again.
    @Test func aCaughtPipelinedFailureKeepsTheWritesBeforeIt() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        #expect(try sandbox.opsh(["-e", Self.table], on: database).status == 0)
        let script = try sandbox.script("caught.lua", """
            db.transaction(function()
              db.send('INSERT INTO events (id, name, n) VALUES (?, ?, ?)', 1, 'first', 0)
              for i = 2, 600 do
                db.send('INSERT INTO events (id, name, n) VALUES (?, ?, ?)', i == 300 and 1 or i, 'e' .. i, i)
              end
              local ok, err = pcall(db.value, 'SELECT count(*) FROM events')
              print(ok, err)
              print(db.value('SELECT count(*) FROM events'), db.value('SELECT max(id) FROM events'))
              db.send('INSERT INTO events (id, name, n) VALUES (?, ?, ?)', 1000, 'after', 0)
            end)
            """)
        let result = try sandbox.opsh(["run", script], on: database)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasPrefix("false\tthe write sent at "), "\(result.stdout)")
        #expect(result.stdout.contains("/caught.lua:4 failed: ERROR 23505"), "\(result.stdout)")
        #expect(result.stdout.contains("\n299\t299\n"), "\(result.stdout)")
        #expect(try database.count("events") == 300)
        #expect(try database.count("events", where: "id = 1000") == 1)
    }

    /// Two processes inserting logs at once, each in a `db.transaction`
    /// loop (ids are version 7 UUIDs from a buffer of random bytes, issue
    /// 27): every id is new, none is repeated across the processes, and
    /// every row lands.
    @Test(arguments: Engine.allCases) func twoProcessesInsertingAtOnceNeverShareAnId(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let setUp = try sandbox.opsh(["-e", """
            \(aProjectSchemeAndBuild)
            print(b.id)
            """], on: db)
        #expect(setUp.status == 0, "\(setUp.stderr)")
        let build = setUp.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let perProcess = 2000
        let script = """
            io.read("l")
            for round = 1, 4 do
              db.transaction(function()
                for i = 1, \(perProcess / 4) do logs.insert{ buildId = "\(build)", content = "line " .. i } end
              end)
            end
            """
        let writers = try (0..<2).map { _ in
            try sandbox.start(opshExecutable, ["--db", db.db, "--busy-timeout", "60", "-e", script], keepingStdinOpen: true)
        }
        // Both start writing together.
        for writer in writers { writer.write("go\n") }
        for writer in writers {
            writer.closeInput()
            let result = writer.finish()
            #expect(result.status == 0, "\(result.stderr)")
        }
        #expect(try db.count("buildLogs") == 2 * perProcess)
        #expect(try db.sql("SELECT count(DISTINCT id) FROM buildLogs") == "\(2 * perProcess)")
    }
}
