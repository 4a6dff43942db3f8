import Foundation
import Testing

/// `opsh -e` and `opsh run` on a real PostgreSQL server (`--db
/// postgresql://…`): each test on a database of its own, checked from
/// another process (psql).
@Suite struct PostgresBatchTests: PostgresSuite {
    let server = try! PostgresServer.shared()
    let sandbox = try! Sandbox()

    @Test func theSchemaIsCreatedOnlyInAnEmptyDatabaseAndOnlyWhenAsked() throws {
        let url = try server.makeDatabase()
        let without = try opsh(url, ["-e", "return 1"])
        #expect(without.status == 3)
        #expect(without.stderr.contains("has no opsh schema: pass --create"), "\(without.stderr)")
        #expect(try server.sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", url: url) == "0")

        // Control: the same database with --create gets every migration by name.
        let created = try opsh(url, ["--create", "-e", "return db.value('SELECT count(*) FROM opsh_migrations')"])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(try server.sql("SELECT string_agg(identifier, ',' ORDER BY identifier) FROM opsh_migrations", url: url)
                == "001_initialSchema,002_indexes,003_audit,004_runners,005_auditChain,006_schemeEnvironment")
        // The same tables as on SQLite (names folded), and the bookkeeping.
        try sandbox.createDatabase()
        let onSQLite = try sandbox.sqlite("""
            SELECT lower(name) FROM sqlite_master WHERE type = 'table'
            AND name NOT IN ('grdb_migrations', 'sqlite_sequence', 'opsh_lua_migrations') ORDER BY 1
            """).split(separator: "\n").map(String.init) + ["opsh_migrations"]
        let onPostgres = try server.sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1", url: url)
            .split(separator: "\n").map(String.init)
        #expect(onPostgres == onSQLite.sorted())

        // A database with tables of its own is refused and left as it was.
        let theirs = try server.makeDatabase()
        try server.sql("CREATE TABLE orders (id int); INSERT INTO orders VALUES (1)", url: theirs)
        let refused = try opsh(theirs, ["--create", "-e", "return 1"])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("has 1 table(s) but no opsh schema"), "\(refused.stderr)")
        #expect(try server.sql("SELECT string_agg(tablename, ',') FROM pg_tables WHERE schemaname = 'public'", url: theirs) == "orders")
    }

    /// The same script prints the same on SQLite and PostgreSQL:
    /// placeholders, 64-bit integers, bytes, NULL, booleans, rows keyed by
    /// the schema's spelling.
    @Test func aScriptRunsUnchangedOnBothEngines() throws {
        let url = try createdDatabase()
        let script = try sandbox.script("portable.lua", """
            db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES (?, ?, ?, ?, ?)",
                    "com.example.app", "App", "App", "/srv/app", 1700000000.5)
            local p = db.first("SELECT * FROM projects WHERE bundleIdentifier = :id", { id = "com.example.app" })
            print(p.bundleIdentifier, p.displayName, p.createdAt)
            print(db.value("SELECT ? + 0", math.maxinteger), db.value("SELECT ? + 0", math.mininteger))
            print(db.value("SELECT ?2 || ?1", "b", "a"))
            print(db.value("SELECT count(*) FROM projects WHERE name = ? OR name = ?", "App", db.NULL))
            print(db.value("SELECT EXISTS (SELECT 1 FROM projects)"), db.value("SELECT NULL") == nil)
            print(#db.value("SELECT ?", db.blob("a\\0\\255")))
            print((db.exec("UPDATE projects SET name = 'Renamed' WHERE bundleIdentifier LIKE 'com.%'")))
            local n = 0
            for row in db.rows("SELECT bundleIdentifier, name FROM projects ORDER BY bundleIdentifier") do n = n + 1; print(row.name) end
            print(n, db.inTransaction())
            local both = "FROM (SELECT 1 AS x UNION ALL SELECT 2) AS t"
            print(db.value("SELECT sum(CAST(x AS BIGINT)) " .. both), db.value("SELECT avg(x) " .. both), math.type(db.value("SELECT sum(CAST(x AS BIGINT)) " .. both)))
            """)
        let expected = """
            com.example.app\tApp\t1700000000.5
            9223372036854775807\t-9223372036854775808
            ab
            1
            1\ttrue
            3
            1
            Renamed
            1\tfalse
            3\t1.5\tinteger

            """
        let onPostgres = try opsh(url, ["run", script])
        #expect(onPostgres.status == 0, "\(onPostgres.stderr)")
        #expect(onPostgres.stdout == expected)
        let onSQLite = try sandbox.opsh(["run", script])
        #expect(onSQLite.status == 0, "\(onSQLite.stderr)")
        #expect(onSQLite.stdout == expected)
        // db.engine says which engine runs.
        #expect(try sandbox.opsh(["-e", "return db.engine"]).stdout == "sqlite\n")
        #expect(try opsh(url, ["-e", "return db.engine"]).stdout == "postgresql\n")
    }

    /// A statement that fails inside `db.transaction`, caught by pcall,
    /// does not doom the transaction (psql's ON_ERROR_ROLLBACK); without
    /// that, PostgreSQL refuses every later statement of the transaction.
    @Test func aCaughtFailureDoesNotDoomTheTransaction() throws {
        let url = try createdDatabase()
        let run = try opsh(url, ["-e", """
            db.transaction(function()
              db.exec("INSERT INTO telemetry (event, created_at) VALUES ('before', 1)")
              local ok, err = pcall(db.exec, "INSERT INTO telemetry (event, created_at) VALUES (NULL, 2)")
              print(ok, err)
              db.exec("INSERT INTO telemetry (event, created_at) VALUES ('after', 3)")
            end)
            """])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("false\tERROR 23502: null value in column \"event\""), "\(run.stdout)")
        #expect(try server.sql("SELECT string_agg(event, ',' ORDER BY id) FROM telemetry", url: url) == "before,after")

        // Control: the same statements in one transaction through psql.
        let doomed = #expect(throws: ShellError.self) {
            try server.sql("""
                BEGIN;
                INSERT INTO telemetry (event, created_at) VALUES ('x', 1);
                DO $$ BEGIN BEGIN INSERT INTO telemetry (event, created_at) VALUES (NULL, 2); EXCEPTION WHEN others THEN RAISE; END; END $$;
                COMMIT;
                """, url: url)
        }
        #expect(doomed?.output.contains("null value in column \"event\"") == true)
        #expect(try server.sql("SELECT count(*) FROM telemetry", url: url) == "2")
    }

    /// `--read-only` is the server's: writes, and ways around a read-only
    /// transaction, are refused with PostgreSQL's reasons; the rows stay.
    @Test func readOnlyIsEnforcedByTheServer() throws {
        let url = try createdDatabase()
        try server.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)", url: url)
        let attacks = [
            ("DELETE FROM telemetry", "25006"),
            ("delete /* a comment */ FROM TELEMETRY", "25006"),
            ("SET transaction_read_only = off", "25001"),
            ("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", ""),
            ("COMMIT", ""),
            ("DELETE FROM telemetry", "25006"),
            ("DO $$ BEGIN DELETE FROM telemetry; END $$", "25006"),
            ("CREATE TABLE t (a int)", "25006"),
            ("SELECT nextval(pg_get_serial_sequence('telemetry', 'id'))", "25006"),
        ]
        let lua = attacks.map { "print(select(2, pcall(db.exec, \"\($0.0)\")))" }.joined(separator: "\n")
            + "\ndb.transaction(function() print(select(2, pcall(db.exec, 'DELETE FROM telemetry'))) end)"
        let run = try opsh(url, ["--read-only", "-e", lua])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (offset, (sql, code)) in attacks.enumerated() where !code.isEmpty {
            #expect(lines[offset].contains("ERROR \(code)"), "\(sql): \(lines[offset])")
        }
        #expect(lines[attacks.count].contains("ERROR 25006"), "\(run.stdout)")
        #expect(try server.sql("SELECT count(*) FROM telemetry", url: url) == "1")
        #expect(try server.sql("SELECT count(*) FROM pg_tables WHERE tablename = 't'", url: url) == "0")

        // Control: without --read-only the same DELETE goes through.
        let writable = try opsh(url, ["-e", "return db.exec('DELETE FROM telemetry')"])
        #expect(writable.status == 0, "\(writable.stderr)")
        #expect(try server.sql("SELECT count(*) FROM telemetry", url: url) == "0")
    }

    @Test func aDryRunRollsBackAndSaysWhatItWouldHaveChanged() throws {
        let url = try createdDatabase()
        try server.sql("INSERT INTO telemetry (event, created_at) VALUES ('a', 1), ('b', 2)", url: url)
        let run = try opsh(url, ["--dry-run", "-e", """
            db.exec("DELETE FROM telemetry WHERE event = 'a'")
            db.exec("UPDATE telemetry SET event = 'c'")
            db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('p', 'P', 'P', '/p', 0)")
            print(db.value("SELECT count(*) FROM telemetry"))
            """])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("1\n"))
        #expect(run.stderr.contains("projects: 1 inserted, 0 updated, 0 deleted"), "\(run.stderr)")
        #expect(run.stderr.contains("telemetry: 0 inserted, 1 updated, 1 deleted"), "\(run.stderr)")
        #expect(try server.sql("SELECT string_agg(event, ',' ORDER BY id) FROM telemetry", url: url) == "a,b")
        #expect(try server.sql("SELECT count(*) FROM projects", url: url) == "0")
    }

    /// A dry run is a transaction the server refuses to commit: a script's
    /// COMMIT, in any spelling, alone or in a script of several
    /// statements, fails there and rolls the whole dry run back, and
    /// nothing runs after it. Each attack is run again without --dry-run
    /// as its control: there it commits.
    @Test func aDryRunCannotBeCommittedByTheScript() throws {
        let attacks = [
            "db.exec(\"DELETE FROM telemetry\"); db.exec(\"COMMIT\")",
            "db.exec(\"DELETE FROM telemetry; END\")",
            "db.exec(\"DELETE FROM telemetry\"); db.exec(\"/* done */ CoMmIt AND CHAIN\")",
            "db.exec(\"DELETE FROM telemetry\"); pcall(db.exec, \"ALTER TABLE pg_temp.opsh_dry_run DISABLE TRIGGER ALL\"); "
                + "pcall(db.exec, \"DISCARD TEMP\"); pcall(db.exec, \"SET CONSTRAINTS ALL IMMEDIATE\"); db.exec(\"COMMIT\")",
            "db.exec(\"DELETE FROM telemetry\"); pcall(db.exec, \"COMMIT\"); db.exec(\"DELETE FROM telemetry\")",
        ]
        for attack in attacks {
            let url = try createdDatabase()
            try server.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)", url: url)
            let dry = try opsh(url, ["--dry-run", "-e", attack])
            #expect(dry.status != 0, "\(attack): \(dry.stdout)")
            #expect(dry.stderr.contains("--dry-run: the statement tried to commit the dry run")
                    || dry.stderr.contains("--dry-run: the dry run's transaction was rolled back"), "\(attack): \(dry.stderr)")
            #expect(try server.sql("SELECT count(*) FROM telemetry", url: url) == "1", "\(attack)")
            // Control: the same script without --dry-run deletes the row
            // (the DELETE commits on its own; a script of several
            // statements is one transaction, which its END cannot commit
            // either: TransactionControlTests).
            let committed = try opsh(url, ["-e", attack])
            let kept = attack.contains("; END") ? "1" : "0"
            #expect(try server.sql("SELECT count(*) FROM telemetry", url: url) == kept, "\(attack): \(committed.stderr)")
        }
        // The guard leaves nothing behind and is not in the summary.
        let url = try createdDatabase()
        try server.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)", url: url)
        let dry = try opsh(url, ["--dry-run", "-e", "db.exec('DELETE FROM telemetry')"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry: 0 inserted, 0 updated, 1 deleted"), "\(dry.stderr)")
        #expect(!dry.stderr.contains("opsh_dry_run"), "\(dry.stderr)")
        #expect(try server.sql("SELECT count(*) FROM telemetry", url: url) == "1")
    }

    /// `db.exec` without values runs a script of several statements, as on
    /// SQLite: one at a time, all or nothing; `;` inside literals,
    /// comments and dollar quotes does not split it.
    @Test func severalStatementsRunAsOneScript() throws {
        let url = try createdDatabase()
        let run = try opsh(url, ["-e", """
            db.exec([[
              CREATE TABLE notes (body text);  -- a comment; with a semicolon
              INSERT INTO notes VALUES ('a;b'), ($$c;d$$); /* ; */
              INSERT INTO notes VALUES (E'e\\;f');
            ]])
            print(db.value("SELECT string_agg(body, '|' ORDER BY body) FROM notes"))
            print(pcall(db.exec, "INSERT INTO notes VALUES ('g'); INSERT INTO nowhere VALUES (1)"))
            print(db.value("SELECT count(*) FROM notes"))
            """])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "a;b|c;d|e;f", "\(run.stdout)")
        // The failing script kept nothing of itself: still three rows.
        #expect(lines.count == 3 && lines[1].contains("false") && lines[1].contains("nowhere"), "\(run.stdout)")
        #expect(lines.last == "3", "\(run.stdout)")
    }

    /// `--timeout` cancels the running statement on the server: the
    /// server is not left running it after opsh exits.
    @Test func aTimeoutCancelsTheStatementOnTheServer() throws {
        let url = try createdDatabase()
        let name = PostgresServer.databaseName(of: url)
        let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE datname = '\(name)' AND query LIKE '%pg_sleep(30)%' AND state = 'active'"
        let started = Date()
        let child = try sandbox.start(opshExecutable, ["--db", url, "--timeout", "3", "-e", "db.exec('SELECT pg_sleep(30)')"])
        // The control: while opsh waits, the server runs the statement.
        #expect(try waitUntil(10) { try server.sql(sleeping) == "1" })
        let run = sandbox.finish(child)
        #expect(run.status == 124, "\(run.stderr)")
        #expect(run.stderr.contains("timed out"))
        #expect(Date().timeIntervalSince(started) < 15)
        // After: the server is not left running it.
        #expect(try waitUntil(2) { try server.sql(sleeping) == "0" })
    }

    /// Errors say where (the script's file and line), quote the SQL and
    /// give the SQLSTATE; undo(), SQLite's only, says why and what to use.
    @Test func errorsSayWhereAndWhat() throws {
        let url = try createdDatabase()
        let script = try sandbox.script("broken.lua", "local a = 1\nlocal n = db.value('SELECT count(*) FROM nope')\n")
        let run = try opsh(url, ["run", script])
        #expect(run.status == 1)
        #expect(run.stderr.contains("broken.lua:2:"), "\(run.stderr)")
        #expect(run.stderr.contains("ERROR 42P01: relation \"nope\" does not exist"), "\(run.stderr)")
        #expect(run.stderr.contains("SELECT count(*) FROM nope"), "\(run.stderr)")

        let undo = try opsh(url, ["-e", "undo()"])
        #expect(undo.status == 1)
        #expect(undo.stderr.contains("(command line):1: undo() is not available on PostgreSQL: it takes a chunk back by applying the inverse of the changeset SQLite's session extension recorded"), "\(undo.stderr)")
        #expect(undo.stderr.contains("start the shell with --dry-run"), "\(undo.stderr)")
    }

    /// `opsh migrate` runs on PostgreSQL: an empty database gets the
    /// schema with --create, and a second run finds nothing to do.
    @Test func migrateCreatesTheSchemaOnlyWhenAsked() throws {
        let url = try server.makeDatabase()
        let refused = try opsh(url, ["migrate"])
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(try server.sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", url: url) == "0")
        let migrate = try opsh(url, ["migrate", "--create"])
        #expect(migrate.status == 0, "\(migrate.stderr)")
        #expect(migrate.stderr.contains("applied 001_initialSchema, 002_indexes, 003_audit, 004_runners, 005_auditChain, 006_schemeEnvironment"), "\(migrate.stderr)")
        let again = try opsh(url, ["migrate"])
        #expect(again.stderr.contains("nothing to migrate"), "\(again.stderr)")
    }
}
