import Foundation
import Testing

/// `--sandbox` refuses every schema change (issue 24, SQLite, item 1): a
/// sandboxed script that could make a trigger, view, index or table, rename
/// `schemes` or its `buildCommand` column, or drop the sandbox's own
/// triggers, could make a later unsandboxed build (a runner's claim,
/// `jobs.start`) run a command of its choice. Each attempt is refused
/// with the reason and leaves the schema as it was; the control runs the
/// same SQL without `--sandbox`, where it changes the schema.
@Suite struct SandboxSchemaTests {
    struct Attack: Sendable, CustomTestStringConvertible {
        let what: String
        let sqlite: String
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
                SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1
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
        try knownIssue(on: engine, "PostgreSQL: --sandbox does not refuse schema changes yet (lead's lane)") {
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
    }

    /// The same refusal whatever route the SQL takes on SQLite: a script
    /// of several statements, `db.transaction`, `db.value`, a dry run and a
    /// chunk at the shell's prompt (the session's own connection).
    static let routes = [
        "db.exec([[%s]])",
        "db.exec([[UPDATE projects SET name = name; %s]])",
        "db.transaction(function() db.exec([[%s]]) end)",
        "db.value([[%s]])",
    ]

    @Test(arguments: routes)
    func theRefusalHoldsOnEveryRoute(_ route: String) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        #expect(try sandbox.opsh(["-e", Self.schemeSetUp], on: database).status == 0)
        let before = try Self.schema(database)
        let code = route.replacingOccurrences(of: "%s", with: Self.pwnedTrigger)
        for extra in [[], ["--dry-run"], ["--max-changes", "100"]] {
            let refused = try sandbox.opsh(["--sandbox"] + extra + ["-e", code], on: database)
            #expect(refused.status == 1, "\(extra): \(refused.stderr)")
            #expect(refused.stderr.contains("sandbox: schema changes are refused"), "\(extra): \(refused.stderr)")
            #expect(try Self.schema(database) == before)
        }
        // Control: without --sandbox the trigger is made.
        let control = try sandbox.opsh(["-e", code], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try database.sql("SELECT count(*) FROM sqlite_master WHERE name = 'zz'") == "1")
    }

    @Test func theSandboxedShellRefusesASchemaChange() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        #expect(try sandbox.opsh(["-e", Self.schemeSetUp], on: database).status == 0)
        let before = try Self.schema(database)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--sandbox"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"UPDATE projects SET name = 'Q'\"); db.exec([[\(Self.pwnedTrigger)]])\r")
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
        open.send("db.exec([[\(Self.pwnedTrigger)]])\r")
        // A schema change at the prompt asks for the table's name first.
        open.expect("type the table's name")
        open.send("builds\r")
        open.expect("committed")
        open.expect("opsh> ")
        open.send("\u{4}")
        #expect(open.waitForExit(timeout: 15) == 0)
        #expect(try database.sql("SELECT count(*) FROM sqlite_master WHERE name = 'zz'") == "1")
    }
}

/// Runs `body`, as a known issue on PostgreSQL (`reason` says whose work
/// it waits for): the same body is the promise on both engines.
func knownIssue(on engine: Engine, _ reason: String, _ body: () throws -> Void) throws {
    if engine == .postgresql {
        withKnownIssue(Comment(rawValue: reason)) { try body() }
    } else {
        try body()
    }
}
