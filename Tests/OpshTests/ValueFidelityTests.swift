import Foundation
import Testing

/// How Lua values become SQL values and keys, end to end through the real
/// opsh on both engines (issue 24, "Every hole found by attack"): a value
/// is stored as given or refused with a reason that names it, never cut
/// short, changed or ignored. SQLite keeps any bytes in text (NUL
/// included); PostgreSQL's text is UTF-8 without NUL, so there such a
/// value is refused, saying so.
@Suite struct ValueFidelityTests {
    let sandbox = try! Sandbox()

    /// A database of `engine` with a project, its scheme and a build, and
    /// a table `side` of three rows, all written by another process.
    func seeded(_ engine: Engine) throws -> TestDatabase {
        let db = try sandbox.createdDatabase(engine)
        try db.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('com.ex.app', 'App', 'App', '/srv/app', 1);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s1', 'com.ex.app', 'Main');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b1', 's1', '1.0', 1, 1);
            CREATE TABLE side (id integer PRIMARY KEY, note text, data bytea);
            INSERT INTO side (id, note) VALUES (1, 'a'), (2, 'b'), (3, 'c');
            """)
        return db
    }

    /// Runs `script` with `opsh -e`; `attempt(f, ...)` in it prints what a
    /// call returned, or `refused: ` and its error.
    func run(_ script: String, on db: TestDatabase, _ options: [String] = []) throws -> TestFolder.Result {
        try sandbox.opsh(options + ["-e", """
            function attempt(f, ...)
              local ok, result = pcall(f, ...)
              if ok then return tostring(result) end
              return "refused: " .. tostring(result)
            end
            \(script)
            """], on: db)
    }

    /// The text of `column` in `table` as hex, from another process.
    func hex(_ column: String, _ table: String, where condition: String, on db: TestDatabase) throws -> String {
        switch db.engine {
        case .sqlite: try db.sql("SELECT hex(\(column)) FROM \(table) WHERE \(condition)")
        case .postgresql: try db.sql("SELECT upper(encode(convert_to(\(column), 'UTF8'), 'hex')) FROM \(table) WHERE \(condition)")
        }
    }

    // MARK: Item 3: a NUL byte in a key or a value

    /// A key with a NUL byte is that key: on SQLite no row has it, so
    /// nothing is deleted or changed (it used to reach the row whose key
    /// ends where the NUL is: `com.ex.app` and its builds were deleted); on
    /// PostgreSQL text cannot hold a NUL, so the call is refused naming the
    /// key. Control: the same calls without the NUL delete and change.
    @Test(arguments: Engine.allCases)
    func aNULByteInAKeyNeverReachesAnotherRow(_ engine: Engine) throws {
        let db = try seeded(engine)
        let attacked = try run(#"""
            print("delete project", attempt(projects.delete, "com.ex.app\0x", { cascade = true }))
            print("delete build", attempt(builds.delete, "b1\0x"))
            print("update project", attempt(projects.update, "com.ex.app\0x", { name = "Changed" }))
            print("update scheme", attempt(schemes.update, "s1\0x", { name = "Changed" }))
            print("get", attempt(projects.get, "com.ex.app\0x"))
            """#, on: db)
        #expect(attacked.status == 0, "\(attacked.stderr)")
        let lines = attacked.stdout.split(separator: "\n").map(String.init)
        switch engine {
        case .sqlite:
            #expect(lines == [
                "delete project\tfalse",
                "delete build\tfalse",
                "update project\trefused: no row in projects with key com.ex.app\\0x",
                "update scheme\trefused: no row in schemes with key s1\\0x",
                "get\tnil",
            ], "\(attacked.stdout)")
        case .postgresql:
            #expect(lines.count == 5, "\(attacked.stdout)")
            for (line, key) in zip(lines, [#"com.ex.app\0x"#, #"b1\0x"#, #"com.ex.app\0x"#, #"s1\0x"#, #"com.ex.app\0x"#]) {
                #expect(line.contains("refused: bad argument #1"), "\(line)")
                #expect(line.contains("key '\(key)' contains a NUL byte (byte \(key.count - 2)), which PostgreSQL text cannot hold"),
                        "\(line)")
            }
        }
        #expect(!attacked.stdout.contains("\0"), "control characters are shown visibly")
        #expect(try db.count("projects") == 1)
        #expect(try db.count("builds") == 1)
        #expect(try db.sql("SELECT name FROM schemes") == "Main")
        #expect(try db.sql("SELECT name FROM projects") == "App")

        // Control: the same calls without the NUL change and delete.
        let control = try run(#"""
            print(attempt(schemes.update, "s1", { name = "Changed" }) ~= nil, attempt(builds.delete, "b1"),
                  attempt(projects.delete, "com.ex.app", { cascade = true }))
            """#, on: db)
        #expect(control.stdout == "true\ttrue\ttrue\n", "\(control.stderr)")
        #expect(try db.count("projects") == 0)
    }

    /// A build id with a NUL byte is refused by `jobs` on both engines (on
    /// SQLite the job manager's statements ended it at the NUL:
    /// `jobs.delete("b1\0x")` deleted `b1`). Control: `jobs.delete("b1")`.
    @Test(arguments: Engine.allCases)
    func aNULByteInABuildIdIsRefusedByJobs(_ engine: Engine) throws {
        let db = try seeded(engine)
        let attacked = try run(#"""
            print(attempt(jobs.delete, "b1\0x"))
            print(attempt(jobs.cancel, { id = "b1\0x" }))
            """#, on: db)
        #expect(attacked.stdout == #"""
            refused: bad argument #1 to 'delete' (build id 'b1\0x' contains a NUL byte (byte 3); no build's id has one)
            refused: bad argument #1 to 'cancel' (build id 'b1\0x' contains a NUL byte (byte 3); no build's id has one)

            """#, "\(attacked.stderr)")
        #expect(try db.count("builds") == 1)
        #expect(try db.sql("SELECT status FROM builds") == "queued")

        let control = try run(#"print(attempt(jobs.delete, "b1"))"#, on: db)
        #expect(control.stdout == "true\n", "\(control.stderr)")
        #expect(try db.count("builds") == 0)
    }

    /// A field with a NUL byte is stored whole on SQLite (it used to be
    /// stored cut at the NUL: `a\0b` as `a`), by the repositories, by
    /// `db.exec` and in a dry run's counted writes; PostgreSQL refuses it
    /// naming the field or the value. Control: the same text without the
    /// NUL is stored on both.
    @Test(arguments: Engine.allCases)
    func aNULByteInAValueIsStoredWholeOrRefusedNeverCut(_ engine: Engine) throws {
        let db = try seeded(engine)
        let attacked = try run(#"""
            print(attempt(function()
              return projects.insert{ bundleIdentifier = "a\0b", name = "N\0M", gitRepositoryURL = "/srv/n" }.name == "N\0M"
            end))
            print(attempt(db.exec, "INSERT INTO side (id, note) VALUES (?, ?)", 4, "x\0y"))
            print(attempt(db.exec, "INSERT INTO side (id, note) VALUES (:id, :note)", { id = 5, note = "p\0q" }))
            print(attempt(function()
              return schemes.insert{ projectBundleIdentifier = "com.ex.app", name = "J", platforms = '["ios"]\0junk' }.platforms
            end))
            """#, on: db)
        #expect(attacked.status == 0, "\(attacked.stderr)")
        let lines = attacked.stdout.split(separator: "\n").map(String.init)
        switch engine {
        case .sqlite:
            #expect(lines.prefix(3) == ["true", "1", "1"], "\(attacked.stdout)")
            // A NUL is never JSON: SQLite's json_valid stops at it, opsh does not.
            #expect(lines.last?.contains(#"invalid value for schemes.platforms: not valid JSON: ["ios"]\0junk"#) == true, "\(lines)")
            #expect(try hex("bundleIdentifier", "projects", where: "name <> 'App'", on: db) == "610062")
            #expect(try hex("name", "projects", where: "name <> 'App'", on: db) == "4E004D")
            #expect(try hex("note", "side", where: "id = 4", on: db) == "780079")
            #expect(try hex("note", "side", where: "id = 5", on: db) == "700071")
            // The dry run's writes go through the counted path: whole too.
            let dry = try run(#"""
                db.exec("INSERT INTO side (id, note) VALUES (?, ?)", 6, "d\0r")
                print(db.value("SELECT hex(note) FROM side WHERE id = 6"))
                """#, on: db, ["--dry-run"])
            #expect(dry.stdout == "640072\n", "\(dry.stderr)")
        case .postgresql:
            #expect(lines.count == 4, "\(attacked.stdout)")
            #expect(lines[3].contains(#"field 'platforms': '["ios"]\0junk' contains a NUL byte (byte 8)"#), "\(lines[3])")
            #expect(lines[0].contains(#"bad argument #1 to 'insert' (field 'bundleIdentifier': 'a\0b' contains a NUL byte (byte 2), which PostgreSQL text cannot hold"#),
                    "\(lines[0])")
            #expect(lines[1].contains(#"value ?2 'x\0y' contains a NUL byte (byte 2), which PostgreSQL text cannot hold"#), "\(lines[1])")
            #expect(lines[1].contains("db.blob"), "\(lines[1])")
            #expect(lines[2].contains(#"value :note 'p\0q' contains a NUL byte (byte 2), which PostgreSQL text cannot hold"#), "\(lines[2])")
            #expect(try db.count("projects") == 1)
            #expect(try db.count("side") == 3)
        }
        #expect(!attacked.stdout.contains("\0"))

        // Control: without the NUL, stored on both.
        let control = try run(#"""
            print(projects.insert{ bundleIdentifier = "ab", name = "NM", gitRepositoryURL = "/srv/n" }.name,
                  db.exec("INSERT INTO side (id, note) VALUES (?, ?)", 7, "xy"))
            """#, on: db)
        #expect(control.stdout.hasPrefix("NM\t1"), "\(control.stderr)")
    }

    /// SQL text with a NUL byte is refused on both engines (SQLite's
    /// prepare stopped at the NUL: `DELETE FROM side\0 WHERE id = 1`
    /// deleted every row). Control: without the NUL one row goes.
    @Test(arguments: Engine.allCases)
    func aNULByteInSQLTextIsRefused(_ engine: Engine) throws {
        let db = try seeded(engine)
        let attacked = try run(#"""
            print(attempt(db.exec, "DELETE FROM side\0 WHERE id = 1"))
            print(attempt(db.query, "SELECT * FROM side\0 WHERE id = 1"))
            print(attempt(db.exec, "DELETE FROM side\0 WHERE id = ?", 1))
            """#, on: db)
        let lines = attacked.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(attacked.stdout) \(attacked.stderr)")
        for line in lines {
            #expect(line.contains(#"the SQL text contains a NUL byte (byte 17): DELETE FROM side\0 WHERE id"#)
                    || line.contains(#"the SQL text contains a NUL byte (byte 19): SELECT * FROM side\0 WHERE id"#), "\(line)")
        }
        #expect(try db.count("side") == 3)

        let control = try run(#"print(attempt(db.exec, "DELETE FROM side WHERE id = 1"))"#, on: db)
        #expect(control.stdout == "1\n", "\(control.stderr)")
        #expect(try db.count("side") == 2)
    }

    /// An export from SQLite holds text with a NUL byte whole (`\u0000`
    /// in the JSON), and importing it gives the same bytes back: the round
    /// trip the README promises. SQLite only: PostgreSQL text cannot hold
    /// the NUL in the first place (the import there refuses it, naming the
    /// field).
    @Test func anExportFromSQLiteKeepsTextByteForByte() throws {
        let db = try sandbox.createdDatabase(.sqlite)
        try db.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
            VALUES ('com.ex.app', 'A' || char(0) || 'B', 'App', '/srv/app', 1);
            """)
        let file = sandbox.root + "/export.json"
        let exported = try sandbox.opsh(["-e", "export.project('com.ex.app', { file = '\(file)' })"], on: db)
        #expect(exported.status == 0, "\(exported.stderr)")
        let text = try String(contentsOfFile: file, encoding: .utf8)
        #expect(text.contains(#""name": "A\u0000B""#), "\(text)")

        let other = try TestDatabase.empty(.sqlite, in: sandbox.root + "/other")
        let imported = try sandbox.opsh(["--create", "-e", "import{ file = '\(file)' }"], on: other)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try other.sql("SELECT hex(name) FROM projects") == "410042")

        // PostgreSQL refuses the document, naming the row and the field.
        let postgres = try sandbox.createdDatabase(.postgresql)
        let refused = try sandbox.opsh(["-e", "import{ file = '\(file)' }"], on: postgres)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("projects[1]: field 'name': 'A\\0B' contains a NUL byte (byte 2), which PostgreSQL text cannot hold"),
                "\(refused.stderr)")
        #expect(try postgres.count("projects") == 0)
    }

    /// An import file that is not UTF-8 is refused naming the byte (it was
    /// decoded with U+FFFD in place of the byte, and that text stored).
    /// Control: the same document in UTF-8 is imported.
    @Test(arguments: Engine.allCases)
    func anImportFileThatIsNotUTF8IsRefused(_ engine: Engine) throws {
        let db = try sandbox.createdDatabase(engine)
        func document(name: [UInt8]) -> Data {
            Data(#"{"format": "opsh-export", "version": 1, "kind": "project", "key": "k", "tables": {"projects": [{"bundleIdentifier": "k", "name": "caf"#.utf8
                 + name + #"", "displayName": "d", "gitRepositoryURL": "/x", "createdAt": 1.0}]}}"#.utf8)
        }
        let file = sandbox.root + "/latin1.json"
        try document(name: [0xE9]).write(to: URL(fileURLWithPath: file))
        let refused = try sandbox.opsh(["-e", "import{ file = '\(file)' }"], on: db)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("import: \(file) is not UTF-8 text (byte 134: 0xE9)"), "\(refused.stderr)")
        #expect(try db.count("projects") == 0)

        try document(name: Array("é".utf8)).write(to: URL(fileURLWithPath: file))
        let control = try sandbox.opsh(["-e", "import{ file = '\(file)' }"], on: db)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try db.sql("SELECT name FROM projects") == "café")
    }

    // MARK: Item 16: values and placeholders must match

    /// Every value given must have its placeholder and every placeholder
    /// its value, on both engines (PostgreSQL used to ignore a value with
    /// no placeholder: `db.exec("DELETE FROM side", 5)` deleted every
    /// row). The message names the counts and the SQL. Values given by
    /// position bind `:name` placeholders by position on both, as SQLite
    /// binds them. Control: matching values run.
    @Test(arguments: Engine.allCases)
    func valuesMustMatchThePlaceholders(_ engine: Engine) throws {
        let db = try seeded(engine)
        let attacked = try run(#"""
            print(attempt(db.exec, "DELETE FROM side", 5))
            print(attempt(db.exec, "DELETE FROM side WHERE id = ? OR id = ?", 5))
            print(attempt(db.exec, "DELETE FROM side WHERE id = ?", 5, 6))
            print(attempt(db.exec, "DELETE FROM side", { id = 5 }))
            print(attempt(db.exec, "DELETE FROM side WHERE id = :id", { id = 5, other = 6 }))
            print(attempt(db.exec, "DELETE FROM side WHERE id = ?", { 5, 6 }))
            print(attempt(db.query, "SELECT * FROM side", 1))
            """#, on: db)
        #expect(attacked.status == 0, "\(attacked.stderr)")
        let lines = attacked.stdout.split(separator: "\n").map(String.init)
        let hint = engine == .postgresql ? " (on PostgreSQL ? is a placeholder: write jsonb's ? operator as ??, or use $1…$n placeholders)" : ""
        #expect(lines == [
            "refused: the statement has 0 placeholders but 1 value was given: DELETE FROM side",
            "refused: the statement has 2 placeholders but 1 value was given\(hint): DELETE FROM side WHERE id = ? OR id = ?",
            "refused: the statement has 1 placeholder but 2 values were given\(hint): DELETE FROM side WHERE id = ?",
            "refused: the table of parameters gives 'id', which no placeholder of the statement names: DELETE FROM side",
            "refused: the table of parameters gives 'other', which no placeholder of the statement names: DELETE FROM side WHERE id = :id",
            "refused: the table of parameters gives 2 values by position but the statement has 1 positional placeholder\(hint): DELETE FROM side WHERE id = ?",
            "refused: the statement has 0 placeholders but 1 value was given: SELECT * FROM side",
        ], "\(attacked.stdout)")
        #expect(try db.count("side") == 3)

        // Control: matching values run; values by position fill :name
        // placeholders in order on both engines, and a table's array fills
        // ?NNN by number.
        let control = try run(#"""
            print(attempt(db.exec, "DELETE FROM side WHERE id = ?", 1), attempt(db.exec, "DELETE FROM side WHERE id = :id", 2),
                  attempt(db.exec, "DELETE FROM side WHERE id = :id", { id = 3 }), attempt(db.value, "SELECT ?2 || ?1", { "b", "a" }))
            """#, on: db)
        #expect(control.stdout == "1\t1\t1\tab\n", "\(control.stderr)")
        #expect(try db.count("side") == 0)
    }

    /// jsonb's `?` operator is written `??` on PostgreSQL (a bare `?` is a
    /// placeholder, as psycopg and JDBC take it), and the error of a bare
    /// one says so. PostgreSQL only: SQLite has no `?` operator.
    @Test func jsonbsQuestionMarkOperatorIsWrittenTwice() throws {
        let db = try sandbox.createdDatabase(.postgresql)
        let result = try run(#"""
            print(attempt(db.value, [[SELECT '{"a": 1}'::jsonb ? 'a']]))
            print(attempt(db.value, [[SELECT '{"a": 1}'::jsonb ?? 'a']]))
            print(attempt(db.value, [[SELECT $1::jsonb ?? 'a']], '{"a": 1}'))
            """#, on: db)
        #expect(result.stdout == #"""
            refused: the statement has 1 placeholder but 0 values were given (on PostgreSQL ? is a placeholder: write jsonb's ? operator as ??, or use $1…$n placeholders): SELECT '{"a": 1}'::jsonb ? 'a'
            1
            1

            """#, "\(result.stderr)")
    }

    // MARK: Item 21: invalid UTF-8

    /// A string that is not UTF-8 is kept as bytes on SQLite (a BLOB) and
    /// refused on PostgreSQL naming the value (it used to be stored as the
    /// text `\x636166e9`), which suggests `db.blob`; inside SQL text it is
    /// refused on both (it used to become U+FFFD). Control: `db.blob`
    /// stores the bytes on both, and UTF-8 text as text.
    @Test(arguments: Engine.allCases)
    func invalidUTF8IsKeptAsBytesOrRefusedNeverChanged(_ engine: Engine) throws {
        let db = try seeded(engine)
        let attacked = try run(#"""
            print(attempt(db.exec, "INSERT INTO side (id, note) VALUES (?, ?)", 4, "caf\xe9"))
            print(attempt(db.exec, "INSERT INTO side (id, note) VALUES (5, 'caf\xe9')"))
            print(attempt(projects.get, "caf\xe9"))
            """#, on: db)
        #expect(attacked.status == 0, "\(attacked.stderr)")
        let lines = attacked.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(attacked.stdout)")
        switch engine {
        case .sqlite:
            #expect(lines.first == "1")
            #expect(try db.sql("SELECT typeof(note), hex(note) FROM side WHERE id = 4") == "blob|636166E9")
        case .postgresql:
            #expect(lines.first?.contains(#"value ?2 'caf\xE9' is not valid UTF-8 (byte 4: 0xE9), which PostgreSQL text cannot hold (SQLite keeps the bytes): pass bytes as db.blob(s)"#) == true,
                    "\(lines)")
            #expect(try db.count("side", where: "id = 4") == 0)
        }
        #expect(lines.dropFirst().first?.contains(#"the SQL text is not valid UTF-8 (byte 44: 0xE9): INSERT INTO side (id, note) VALUES (5, 'caf\xE9')"#) == true,
                "\(lines)")
        #expect(lines.last?.contains(#"bad argument #1 to 'get' (string is not valid UTF-8 (byte 4: 0xE9))"#) == true, "\(lines)")
        #expect(try db.count("side", where: "id = 5") == 0)

        let control = try run(#"""
            print(attempt(db.exec, "INSERT INTO side (id, data) VALUES (?, ?)", 6, db.blob("caf\xe9")),
                  attempt(db.exec, "INSERT INTO side (id, note) VALUES (7, 'café')"))
            """#, on: db)
        #expect(control.stdout == "1\t1\n", "\(control.stderr)")
        let stored = engine == .sqlite ? "SELECT hex(data) FROM side WHERE id = 6" : "SELECT upper(encode(data, 'hex')) FROM side WHERE id = 6"
        #expect(try db.sql(stored) == "636166E9")
    }

    // MARK: Item 15: empty SQL, NaN

    /// SQL with no statement in it (space, `;`, comments) is nothing to
    /// do, as sqlite3 and psql take it, on both engines (SQLite said "SQL
    /// error: not an error").
    @Test(arguments: Engine.allCases)
    func sqlWithNoStatementIsNothingToDo(_ engine: Engine) throws {
        let db = try seeded(engine)
        let result = try run(#"""
            print((db.exec("  ;;; ")), (db.exec("-- nothing here")), (db.exec("/* nor here */ ;")))
            print(db.value("  "), db.first(";"), #db.query("-- x"))
            local n = 0
            for _ in db.rows(" ") do n = n + 1 end
            print(n, attempt(db.exec, " ", 1))
            """#, on: db)
        #expect(result.stdout == "0\t0\t0\nnil\tnil\t0\n0\trefused: the statement has 0 placeholders but 1 value was given:  \n",
                "\(result.stdout) \(result.stderr)")
        #expect(result.status == 0)
    }

    /// NaN is refused as a value, naming where it was: in a repository's
    /// `where` filter (it matched nothing on SQLite, which binds NaN as
    /// NULL, and NaN rows on PostgreSQL) and as a parameter (SQLite stored
    /// NULL, PostgreSQL NaN). Control: a number filters and is stored.
    @Test(arguments: Engine.allCases)
    func nanIsRefusedWithWhereItWas(_ engine: Engine) throws {
        let db = try seeded(engine)
        let attacked = try run(#"""
            print(attempt(builds.list, { where = { progress = 0/0 } }))
            print(attempt(builds.count, { where = { progress = { gt = 0/0 } } }))
            print(attempt(db.exec, "INSERT INTO side (id, note) VALUES (?, ?)", 4, 0/0))
            """#, on: db)
        #expect(attacked.status == 0, "\(attacked.stderr)")
        let lines = attacked.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(attacked.stdout)")
        #expect(lines.first?.contains("bad argument #1 to 'list' (where.progress: NaN (not a number) is not a value SQL compares or stores alike on every engine") == true, "\(lines)")
        #expect(lines.dropFirst().first?.contains("bad argument #1 to 'count' (where.progress.gt: NaN (not a number)") == true, "\(lines)")
        #expect(lines.last?.contains("bad argument #3 to 'exec' (value ?2 is NaN (not a number), which SQLite stores as NULL and PostgreSQL as NaN: write db.NULL or a number)") == true, "\(lines)")
        #expect(try db.count("side") == 3)

        let control = try run(#"""
            print(#builds.list{ where = { progress = 0 } }, db.exec("INSERT INTO side (id, note) VALUES (?, ?)", 8, 0.5))
            """#, on: db)
        #expect(control.stdout.hasPrefix("1\t1"), "\(control.stderr)")
    }

    /// db.copy and .import keep every byte of text on SQLite: the copy's
    /// INSERT bound text as a C string, so `a\0b` was stored as `a`. On
    /// PostgreSQL the value is refused, naming it. Control: the same copy
    /// without the NUL.
    @Test(arguments: Engine.allCases)
    func aNULByteInACopiedValueIsKeptOrRefusedNeverCut(_ engine: Engine) throws {
        let db = try seeded(engine)
        let csv = sandbox.root + "/nul.csv"
        try Data("note\nc\u{0}d\n".utf8).write(to: URL(fileURLWithPath: csv))
        let attacked = try run(#"""
            print(attempt(db.copy, "side", { { 11, "a\0b" } }, { columns = { "id", "note" } }))
            print(attempt(db.copy, "side", "\#(csv)", { header = true, columns = { "note" } }))
            """#, on: db)
        #expect(attacked.status == 0, "\(attacked.stderr)")
        switch engine {
        case .sqlite:
            #expect(attacked.stdout == "1\n1\n", "\(attacked.stdout)")
            #expect(try db.sql("SELECT hex(note) FROM side WHERE id > 3 ORDER BY id") == "610062\n630064")
        case .postgresql:
            let lines = attacked.stdout.split(separator: "\n").map(String.init)
            #expect(lines.count == 2 && lines.allSatisfy { $0.hasPrefix("refused:") }, "\(attacked.stdout)")
            #expect(lines.first?.contains("NUL") == true, "\(attacked.stdout)")
            #expect(try db.count("side") == 3)
        }
        let control = try run(#"print(attempt(db.copy, "side", { { 9, "ab" } }, { columns = { "id", "note" } }))"#, on: db)
        #expect(control.stdout == "1\n", "\(control.stderr)")
    }
}
