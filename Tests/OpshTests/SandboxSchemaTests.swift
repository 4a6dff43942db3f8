import Foundation
import Testing

/// `--sandbox` refuses every schema change (issue 24, item 1): a
/// sandboxed script that could make a trigger, view, index or table, rename
/// `schemes` or its `buildCommand` column, or drop the sandbox's own
/// triggers, could make a later unsandboxed build (a runner's claim,
/// `jobs.start`) run a command of its choice. Each attempt is refused
/// with the reason and leaves the schema as it was; the control runs the
/// same SQL without `--sandbox`, where it changes the schema. On SQLite
/// the statement is refused as it is compiled; on PostgreSQL the server's
/// counters of its catalog, read after each statement, refuse it and it is
/// rolled back (`PostgresSandbox`), so a `DO` block or a function that
/// runs DDL through `EXECUTE` is refused as a statement of its own is.
@Suite struct SandboxSchemaTests {
    struct Attack: Sendable, CustomTestStringConvertible {
        let what: String
        /// nil where SQLite has no such thing (DO blocks, functions, rules).
        let sqlite: String?
        /// The same on PostgreSQL; nil where it has no such object (SQLite's
        /// TEMP triggers on another schema's table, the sandbox's own
        /// triggers, which only the SQLite session makes).
        let postgres: String?
        var testDescription: String { what }
    }

    static let pwnedTrigger = "CREATE TRIGGER zz AFTER UPDATE ON builds BEGIN UPDATE schemes SET buildCommand = 'touch pwned' WHERE id = NEW.schemeId; END"

    static let attacks: [Attack] = [
        Attack(what: "a trigger that rewrites the build command", sqlite: pwnedTrigger, postgres: """
            CREATE FUNCTION zz() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN UPDATE schemes SET buildcommand = ''touch pwned'' WHERE id = NEW.schemeid; RETURN NEW; END';
            CREATE TRIGGER zz AFTER UPDATE ON builds FOR EACH ROW EXECUTE FUNCTION zz()
            """),
        Attack(what: "the same as a TEMP trigger",
               sqlite: "CREATE TEMP TRIGGER zz AFTER UPDATE ON main.builds BEGIN UPDATE schemes SET buildCommand = 'touch pwned'; END", postgres: nil),
        Attack(what: "schemes renamed and replaced",
               sqlite: "ALTER TABLE schemes RENAME TO s2; CREATE TABLE schemes AS SELECT id, projectBundleIdentifier, name, 'touch pwned' AS buildCommand FROM s2",
               postgres: "ALTER TABLE schemes RENAME TO s2; CREATE TABLE schemes AS SELECT id, projectbundleidentifier, name, 'touch pwned' AS buildcommand FROM s2"),
        Attack(what: "the build command's column renamed", sqlite: "ALTER TABLE schemes RENAME COLUMN buildCommand TO bc",
               postgres: "ALTER TABLE schemes RENAME COLUMN buildcommand TO bc"),
        Attack(what: "a column added", sqlite: "ALTER TABLE schemes ADD COLUMN extra TEXT", postgres: "ALTER TABLE schemes ADD COLUMN extra text"),
        Attack(what: "a table", sqlite: "CREATE TABLE zt (a)", postgres: "CREATE TABLE zt (a integer)"),
        Attack(what: "a view", sqlite: "CREATE VIEW zv AS SELECT 1 AS a", postgres: "CREATE VIEW zv AS SELECT 1 AS a"),
        Attack(what: "a TEMP view", sqlite: "CREATE TEMP VIEW zv AS SELECT 1 AS a", postgres: "CREATE TEMP VIEW zv AS SELECT 1 AS a"),
        Attack(what: "a TEMP table", sqlite: "CREATE TEMP TABLE zt (a)", postgres: "CREATE TEMP TABLE zt (a integer)"),
        Attack(what: "an index", sqlite: "CREATE INDEX zi ON builds (status)", postgres: "CREATE INDEX zi ON builds (status)"),
        Attack(what: "a table dropped", sqlite: "DROP TABLE telemetry", postgres: "DROP TABLE telemetry"),
        Attack(what: "an index dropped", sqlite: "DROP INDEX telemetry_on_created", postgres: "DROP INDEX telemetry_on_created"),
        Attack(what: "the sandbox's own trigger dropped", sqlite: "DROP TRIGGER temp.opsh_sandbox_build_command", postgres: nil),
        Attack(what: "a drop that does nothing now but would once the table exists",
               sqlite: "DROP TABLE IF EXISTS zt", postgres: nil),
        // One line: the shell's test types it at the prompt.
        Attack(what: "a trigger made by a DO block's EXECUTE", sqlite: nil, postgres: "DO $$ BEGIN "
               + "EXECUTE 'CREATE FUNCTION zz() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN UPDATE schemes SET buildcommand = ''touch pwned'' WHERE id = NEW.schemeid; RETURN NEW; END $f$'; "
               + "EXECUTE 'CREATE TRIGGER zz AFTER UPDATE ON builds FOR EACH ROW EXECUTE FUNCTION zz()'; END $$"),
        Attack(what: "a rule that rewrites the build command", sqlite: nil,
               postgres: "CREATE RULE zr AS ON UPDATE TO builds DO ALSO UPDATE schemes SET buildcommand = 'touch pwned'"),
        Attack(what: "a function", sqlite: nil, postgres: "CREATE FUNCTION zf() RETURNS integer LANGUAGE sql AS 'SELECT 1'"),
        Attack(what: "a procedure", sqlite: nil, postgres: "CREATE PROCEDURE zp() LANGUAGE sql AS 'SELECT 1'"),
        Attack(what: "a TEMP function", sqlite: nil, postgres: "CREATE FUNCTION pg_temp.zf() RETURNS integer LANGUAGE sql AS 'SELECT 1'"),
        Attack(what: "opsh's own trigger function replaced", sqlite: nil, postgres: """
            CREATE OR REPLACE FUNCTION opsh_note_truncate() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN UPDATE schemes SET buildcommand = ''touch pwned''; RETURN NULL; END'
            """),
        Attack(what: "opsh's TRUNCATE note disabled", sqlite: nil, postgres: "ALTER TABLE telemetry DISABLE TRIGGER opsh_note_truncate"),
    ]

    /// The schema as another process sees it (names and SQL of every object).
    static func schema(_ database: TestDatabase) throws -> String {
        switch database.engine {
        case .sqlite:
            return try database.sql("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        case .postgresql:
            return try database.sql("""
                SELECT c.relkind::text || ' ' || c.relname || ' ' || coalesce(string_agg(a.attname, ',' ORDER BY a.attnum), '')
                FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                WHERE n.nspname = current_schema() GROUP BY c.relkind, c.relname ORDER BY 1;
                SELECT tgname || ' ' || tgenabled::text FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1;
                SELECT p.proname || ' ' || md5(p.prosrc) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = current_schema() ORDER BY 1;
                SELECT rulename FROM pg_rules WHERE schemaname = current_schema() ORDER BY 1
                """)
        }
    }

    static let schemeSetUp = """
        projects.insert{ bundleIdentifier = "p", name = "P", gitRepositoryURL = "/srv/p" }
        local s = schemes.insert{ projectBundleIdentifier = "p", name = "Release", buildCommand = "make", platforms = { "linux" } }
        db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES ('b1', ?, '1.0', 1, 'queued', 1)", s.id)
        """

    @Test(arguments: Engine.allCases, attacks)
    func everySchemeChangeIsRefusedInTheSandbox(_ engine: Engine, _ attack: Attack) throws {
        guard let sql = engine == .sqlite ? attack.sqlite : attack.postgres else { return }
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        #expect(try sandbox.opsh(["-e", Self.schemeSetUp], on: database).status == 0)
        let before = try Self.schema(database)
        let code = "db.exec([[\(sql)]])"
        let refused = try sandbox.opsh(["--sandbox", "-e", code], on: database)
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("sandbox: schema changes are refused"), "\(refused.stderr)")
        #expect(try Self.schema(database) == before)
        // A later, unsandboxed write to builds (a runner's claim) runs no
        // trigger of the script's: the build command is still the scheme's.
        try database.sql("UPDATE builds SET status = 'running' WHERE id = 'b1'")
        #expect(try database.sql("SELECT buildCommand FROM schemes") == "make")
        // Control: without --sandbox the same SQL changes the schema.
        guard !attack.what.contains("sandbox's own") && !attack.what.contains("does nothing now") else { return }
        let control = try sandbox.opsh(["-e", code], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        if !attack.what.contains("TEMP") {
            #expect(try Self.schema(database) != before, "the control changed nothing")
        }
        if attack.what.hasPrefix("a trigger") {
            try database.sql("UPDATE builds SET status = 'queued' WHERE id = 'b1'")
            #expect(try database.sql("SELECT buildCommand FROM schemes") == "touch pwned")
        }
    }

    /// The trigger of the routes' attack, made in one statement: SQLite's
    /// CREATE TRIGGER, PostgreSQL's DO block making its function and trigger.
    static func pwnedTrigger(_ engine: Engine) -> String {
        switch engine {
        case .sqlite: pwnedTrigger
        case .postgresql: attacks.first { $0.what == "a trigger made by a DO block's EXECUTE" }!.postgres!
        }
    }

    /// How many triggers named zz the database has.
    static func triggersNamedZZ(_ database: TestDatabase) throws -> String {
        switch database.engine {
        case .sqlite: try database.sql("SELECT count(*) FROM sqlite_master WHERE name = 'zz'")
        case .postgresql: try database.sql("SELECT count(*) FROM pg_trigger WHERE tgname = 'zz'")
        }
    }

    /// The same refusal whatever route the SQL takes: a script of several
    /// statements, `db.transaction`, `db.value`, a dry run, a
    /// `--max-changes` run and a chunk at the shell's prompt (SQLite: the
    /// session's own connection; PostgreSQL: the chunk's transaction).
    static let routes = [
        "db.exec([[%s]])",
        "db.exec([[UPDATE projects SET name = name; %s]])",
        "db.transaction(function() db.exec([[%s]]) end)",
        "db.value([[%s]])",
    ]

    @Test(arguments: Engine.allCases, routes)
    func theRefusalHoldsOnEveryRoute(_ engine: Engine, _ route: String) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        #expect(try sandbox.opsh(["-e", Self.schemeSetUp], on: database).status == 0)
        let before = try Self.schema(database)
        let code = route.replacingOccurrences(of: "%s", with: Self.pwnedTrigger(engine))
        for extra in [[], ["--dry-run"], ["--max-changes", "100"]] {
            let refused = try sandbox.opsh(["--sandbox"] + extra + ["-e", code], on: database)
            #expect(refused.status == 1, "\(extra): \(refused.stderr)")
            #expect(refused.stderr.contains("sandbox: schema changes are refused"), "\(extra): \(refused.stderr)")
            #expect(try Self.schema(database) == before)
        }
        // Control: without --sandbox the trigger is made.
        let control = try sandbox.opsh(["-e", code], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try Self.triggersNamedZZ(database) == "1")
    }

    @Test(arguments: Engine.allCases)
    func theSandboxedShellRefusesASchemaChange(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        #expect(try sandbox.opsh(["-e", Self.schemeSetUp], on: database).status == 0)
        let before = try Self.schema(database)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--sandbox"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"UPDATE projects SET name = 'Q'\"); db.exec([[\(Self.pwnedTrigger(engine))]])\r")
        terminal.expect("sandbox: schema changes are refused")
        terminal.expect("opsh> ")
        terminal.send("db.exec([[CREATE TEMP VIEW zv AS SELECT 1 AS a]])\r")
        terminal.expect("sandbox: schema changes are refused")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(try Self.schema(database) == before)
        #expect(try database.sql("SELECT name FROM projects") == "P")
        // Control: the same chunk without --sandbox commits the trigger.
        let open = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        open.expect("opsh> ")
        open.send("db.exec([[\(Self.pwnedTrigger(engine))]])\r")
        // A schema change at the prompt asks for the table's name first.
        open.expect("type the table's name")
        open.send("builds\r")
        open.expect("committed")
        open.expect("opsh> ")
        open.send("\u{4}")
        #expect(open.waitForExit(timeout: 15) == 0)
        #expect(try Self.triggersNamedZZ(database) == "1")
    }

    /// A function made outside the sandbox that runs DDL through EXECUTE
    /// is refused when a sandboxed query calls it: the server's counters
    /// see what it did, whatever statement called it; a script that catches
    /// the refusal goes on, and its other writes land. PostgreSQL only:
    /// SQLite has no functions written in SQL.
    @Test func aFunctionThatChangesTheSchemaIsRefusedWhenCalled() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        #expect(try sandbox.opsh(["-e", Self.schemeSetUp], on: database).status == 0)
        try database.sql("CREATE FUNCTION make(what text) RETURNS integer LANGUAGE plpgsql AS $$ BEGIN EXECUTE what; RETURN 1; END $$")
        let before = try Self.schema(database)
        let call = "return db.value([[SELECT make('CREATE VIEW zv AS SELECT 1 AS a')]])"
        let refused = try sandbox.opsh(["--sandbox", "-e", call], on: database)
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("sandbox: schema changes are refused"), "\(refused.stderr)")
        #expect(try Self.schema(database) == before)
        let caught = try sandbox.opsh(["--sandbox", "-e", """
            print(pcall(db.value, [[SELECT make('CREATE TABLE zt (a integer)')]]))
            db.exec("UPDATE projects SET name = 'Q'")
            """], on: database)
        #expect(caught.status == 0, "\(caught.stderr)")
        #expect(caught.stdout.hasPrefix("false"), "\(caught.stdout)")
        #expect(try database.sql("SELECT name FROM projects") == "Q")
        #expect(try Self.schema(database) == before)
        // Control: without --sandbox the call makes the view.
        let control = try sandbox.opsh(["-e", call], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try database.sql("SELECT count(*) FROM pg_views WHERE viewname = 'zv'") == "1")
    }

    /// What PostgreSQL's sandbox refuses beyond SQLite's: TRUNCATE gives a
    /// table a new file, a write to the server's catalog the sandbox cannot
    /// tell from ALTER TABLE's, so it is refused, saying to DELETE instead;
    /// DELETE goes through. PostgreSQL only: SQLite has no TRUNCATE.
    @Test func truncateIsRefusedInPostgreSQLsSandboxAndDeleteIsNot() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("INSERT INTO telemetry (event, created_at) SELECT 'e', i FROM generate_series(1, 10) AS i")
        let truncate = try sandbox.opsh(["--sandbox", "-e", "db.exec('TRUNCATE telemetry')"], on: database)
        #expect(truncate.status == 1, "\(truncate.stderr)")
        #expect(truncate.stderr.contains("TRUNCATE too"), "\(truncate.stderr)")
        #expect(try database.count("telemetry") == 10)
        let delete = try sandbox.opsh(["--sandbox", "-e", "db.exec('DELETE FROM telemetry')"], on: database)
        #expect(delete.status == 0, "\(delete.stderr)")
        #expect(try database.count("telemetry") == 0)
        // Control: without --sandbox TRUNCATE runs.
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('e', 1)")
        let control = try sandbox.opsh(["-e", "db.exec('TRUNCATE telemetry')"], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try database.count("telemetry") == 0)
    }
}
