import Foundation
import Testing

/// PostgreSQL only (SQLite has no search_path): opsh's tables named in
/// their schema (27x) leave the rest of an own statement — its operators,
/// functions, types — to the session's `search_path`, and pg_catalog is
/// searched first only when the path does not name it. A script's `SET
/// search_path = evil, pg_catalog, public` put its own `=` and its own
/// server counters before the built-in ones (scripts/reliability-attacks.md,
/// 28e, 28f).
@Suite struct OwnSearchPathTests {
    static let insertTwo = """
        INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
        VALUES ('com.a', 'A', 'A', 'u', 0), ('com.b', 'B', 'B', 'u', 0)
        """
    static let path = "db.exec('SET search_path = evil, pg_catalog, public')"
    /// The second insert's projects, after the first run deleted com.a.
    static let insertAC = insertTwo.replacingOccurrences(of: "('com.b', 'B', 'B', 'u', 0)", with: "('com.c', 'C', 'C', 'u', 0)")
    /// An operator `evil.=` that holds for every pair of texts.
    static let evilEquals = """
        CREATE SCHEMA evil;
        CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
        CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
        """

    /// An operator `evil.=` that holds for every pair of texts: the
    /// script's own query reads it (the control: the shadow is real, its
    /// count of a name nobody has is every row), and `projects.delete`
    /// after it deletes its one project, outside and inside a transaction;
    /// the script's path is its own again after each.
    @Test func anOperatorFirstOnTheSearchPathDoesNotSteerTheRepositories() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql(Self.insertTwo)
        try database.sql(Self.evilEquals)
        let run = try sandbox.opsh(["-e", """
            \(Self.path)
            print(db.value('SELECT count(*) FROM projects WHERE bundleIdentifier = ?', 'nobody'))
            print(projects.delete('com.a'))
            print(db.value('SHOW search_path'))
            print(db.value('SELECT count(*) FROM projects WHERE bundleIdentifier = ?', 'nobody'))
            """], on: database)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "2\ntrue\nevil, pg_catalog, public\n1\n", "\(run.stdout)")
        #expect(try database.sql("SELECT bundleIdentifier FROM public.projects") == "com.b")

        try database.sql(Self.insertAC)
        let inTransaction = try sandbox.opsh(["-e", """
            db.transaction(function()
              \(Self.path)
              print(db.value('SELECT count(*) FROM projects WHERE bundleIdentifier = ?', 'nobody'))
              print(projects.delete('com.a'))
              db.send("UPDATE projects SET name = 'sent' WHERE bundleIdentifier = 'nobody'")
              print(projects.get('com.b').name)
            end)
            """], on: database)
        #expect(inTransaction.status == 0, "\(inTransaction.stderr)")
        // The script's db.send ran with its own path (its `=` held for both rows left).
        #expect(inTransaction.stdout == "3\ntrue\nsent\n", "\(inTransaction.stdout)")
        #expect(try database.sql("SELECT bundleIdentifier || ':' || name FROM public.projects ORDER BY 1") == "com.b:sent\ncom.c:sent")
    }

    /// Functions `evil.pg_stat_get_xact_tuples_*` that count nothing: the
    /// script's own read of the counter is 0 (the control: the shadow is
    /// real), and its DELETE of 20 rows is still refused by `--max-changes
    /// 5` and reported by `--dry-run`; without the cap it deletes them.
    @Test func countersFirstOnTheSearchPathDoNotHideARunsChanges() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
            SELECT 'com.' || g, 'A', 'A', 'u', 0 FROM generate_series(1, 20) g;
            CREATE SCHEMA evil;
            CREATE FUNCTION evil.pg_stat_get_xact_tuples_inserted(oid) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
            CREATE FUNCTION evil.pg_stat_get_xact_tuples_updated(oid) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
            CREATE FUNCTION evil.pg_stat_get_xact_tuples_deleted(oid) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
            """)
        let delete = """
            \(Self.path)
            db.exec('DELETE FROM projects')
            print('read', db.value("SELECT pg_stat_get_xact_tuples_deleted('public.projects'::regclass)"))
            """
        let capped = try sandbox.opsh(["--max-changes", "5", "-e", delete], on: database)
        #expect(capped.status == 1, "\(capped.stdout)")
        #expect(capped.stdout == "read\t0\n", "the script reads its own counter: \(capped.stdout)")
        #expect(capped.stderr.contains("the run changed 20 rows (projects: 20 deleted), more than its limit of 5"), "\(capped.stderr)")
        #expect(try database.count("public.projects") == 20)

        let dry = try sandbox.opsh(["--dry-run", "-e", delete], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("projects: 0 inserted, 0 updated, 20 deleted"), "\(dry.stderr)")
        #expect(try database.count("public.projects") == 20)

        let control = try sandbox.opsh(["--max-changes", "20", "-e", delete], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try database.count("public.projects") == 0)
    }

    /// A schema named as the role (the default path's `"$user"`, first on
    /// every new connection's path) made by an earlier script, with a
    /// `builds` table of its own: a new connection's unqualified `builds`
    /// is that table (the control: the shadow is real), and `jobs.enqueue`,
    /// whose queue runs on connections of its own, still queues the build
    /// in opsh's table, where `builds.get` finds it.
    @Test func aSchemaNamedAsTheRoleDoesNotTakeTheJobManagersWrites() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('com.a', 'A', 'A', 'u', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand) VALUES ('s1', 'com.a', 'S', 'true')
            """)
        let role = try database.sql("SELECT current_user")
        let made = try sandbox.opsh(["-e", """
            db.exec('CREATE SCHEMA "\(role)"')
            db.exec('CREATE TABLE "\(role)".builds (LIKE public.builds INCLUDING ALL)')
            """], on: database)
        #expect(made.status == 0, "\(made.stderr)")
        let found = try database.sql("SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = to_regclass('builds')")
        #expect(found == role || found == "\"\(role)\"", "a new connection's builds: \(found)")

        let queued = try sandbox.opsh(["-e", "local b = jobs.enqueue{ scheme = 's1', version = 'v1' } print(builds.get(b.id).status)"], on: database)
        #expect(queued.status == 0, "\(queued.stderr)")
        #expect(queued.stdout == "queued\n", "\(queued.stdout)")
        #expect(try database.count("public.builds") == 1)
        #expect(try database.count("\"\(role)\".builds") == 0)
    }

    /// The same schema, made by a script, with an empty `builds`: `opsh
    /// runner` (its queue on connections of its own, no session) looked
    /// for work there with the role's path, and never ran the build queued
    /// in opsh's table.
    @Test func aSchemaNamedAsTheRoleDoesNotTakeTheRunnersQueue() throws {
        let fixture = try RunnerSandbox(.postgresql)
        let scheme = try fixture.scheme("Append", "echo \"$OPSH_BUILD_ID\" >> '\(fixture.ranFile)'")
        let role = try fixture.sql("SELECT current_user")
        let made = try fixture.sandbox.opsh(["-e", """
            db.exec('CREATE SCHEMA "\(role)"')
            db.exec('CREATE TABLE "\(role)".builds (LIKE public.builds INCLUDING ALL)')
            """], on: fixture.database)
        #expect(made.status == 0, "\(made.stderr)")
        let found = try fixture.sql("SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = to_regclass('builds')")
        #expect(found == role || found == "\"\(role)\"", "a new connection's builds: \(found)")

        let build = try fixture.enqueue(scheme)[0]
        let runner = try fixture.startRunner(["--heartbeat", "0.3"])
        let ran = try waitUntil(60) { try fixture.sql("SELECT status FROM public.builds WHERE id = '\(build)'") == "succeeded" }
        kill(runner.pid, SIGTERM)
        let stopped = runner.finish()
        #expect(ran, "\(stopped.stderr)")
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(fixture.ranIds() == [build])
        #expect(try fixture.sql("SELECT count(*) FROM \"\(role)\".builds") == "0")
    }

    /// The same schema with a table of its own: `vacuum()`, on a
    /// connection of its own, vacuumed the tables of that connection's
    /// `current_schema()`, the role's schema, and none of opsh's.
    @Test func aSchemaNamedAsTheRoleDoesNotTakeVacuum() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        let role = try database.sql("SELECT current_user")
        let made = try sandbox.opsh(["-e", """
            db.exec('CREATE SCHEMA "\(role)"')
            db.exec('CREATE TABLE "\(role)".decoy (x int)')
            """], on: database)
        #expect(made.status == 0, "\(made.stderr)")
        #expect(try database.sql("SELECT current_schema()") == role, "a new connection's schema is the role's")

        let vacuumed = try sandbox.opsh(["-e", """
            local listed = {}
            for _, name in ipairs(vacuum().tables) do listed[name] = true end
            print(listed.telemetry, listed.projects, listed.decoy)
            """], on: database)
        #expect(vacuumed.status == 0, "\(vacuumed.stderr)")
        #expect(vacuumed.stdout == "true\ttrue\tnil\n", "\(vacuumed.stdout)")
        #expect(try database.sql("SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE schemaname = 'public' AND relname = 'telemetry'") == "t")
    }

    /// A schema named as the role holding a copy of opsh's tables, made
    /// by a script: every later session found its `opsh_migrations` first
    /// and read and wrote the copies. Now opening refuses, naming both
    /// schemas; the control names one in `PGOPTIONS` and reads opsh's.
    @Test func aSecondSchemaOfOpshsTablesOnThePathIsRefusedAtOpening() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql(Self.insertTwo)
        let role = try database.sql("SELECT current_user")
        let made = try sandbox.opsh(["-e", Self.copiesOfOpshsTables(in: "\"\(role)\"")], on: database)
        #expect(made.status == 0, "\(made.stderr)")

        let refused = try sandbox.opsh(["-e", "return projects.count()"], on: database)
        #expect(refused.status == 3, "\(refused.stdout)")
        #expect(refused.stderr.contains("opsh's tables are in 2 schemas on the session's search_path (\(role), public)"), "\(refused.stderr)")
        #expect(refused.stderr.contains("PGOPTIONS ('-c search_path=public')"), "\(refused.stderr)")

        let named = try sandbox.opsh(["-e", "return projects.count()"], on: database,
                                     environment: ["PGOPTIONS": "-c search_path=public"])
        #expect(named.status == 0, "\(named.stderr)")
        #expect(named.stdout == "2\n", "\(named.stdout)")
    }

    /// A script that makes `schema` (as SQL names it) with copies of
    /// `opsh_migrations` (its rows too) and an empty `projects`: a second
    /// holder of opsh's tables.
    static func copiesOfOpshsTables(in schema: String) -> String {
        "db.exec('CREATE SCHEMA \(schema)') "
            + ["opsh_migrations", "projects"].map { "db.exec('CREATE TABLE \(schema).\($0) (LIKE public.\($0) INCLUDING ALL)') " }.joined()
            + "db.exec('INSERT INTO \(schema).opsh_migrations SELECT * FROM public.opsh_migrations')"
    }

    /// A script's copies of `opsh_migrations` and `projects` in a schema of
    /// its own, and `ALTER DATABASE … SET search_path` to it alone (or
    /// `ALTER ROLE`): the setting outlives the script, and every later
    /// session found one holder on its path, the copy, and read and wrote
    /// it (`projects.count()` said 0) with no refusal: 28k looks only
    /// along the path. The control names the copy's schema in the
    /// connection, which a script cannot set: opened, read as asked.
    @Test func aPathSetForLaterSessionsAwayFromOpshsSchemaIsRefusedAtOpening() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql(Self.insertTwo)
        let made = try sandbox.opsh(["-e", Self.copiesOfOpshsTables(in: "decoy")
                                     + " db.exec([[DO $$BEGIN EXECUTE pg_catalog.format('ALTER DATABASE %I SET search_path = decoy', pg_catalog.current_database()); END$$]])"],
                                    on: database)
        #expect(made.status == 0, "\(made.stderr)")
        // The run that set the path has its own audit row: the trail's
        // connection opens with the session's pinned path.
        #expect(!made.stderr.contains("audit"), "\(made.stderr)")
        #expect(try database.sql("SELECT count(*) FROM public.opsh_audit WHERE code LIKE '%ALTER DATABASE%'") == "1")

        let refused = try sandbox.opsh(["-e", "return projects.count()"], on: database)
        #expect(refused.status == 3, "\(refused.stdout)")
        #expect(refused.stderr.contains("opsh's tables are also in public, off the session's search_path (decoy), which ALTER DATABASE or ALTER ROLE set for every session"), "\(refused.stderr)")
        #expect(refused.stderr.contains("PGOPTIONS ('-c search_path=public')"), "\(refused.stderr)")

        let named = try sandbox.opsh(["-e", "return projects.count()"], on: database,
                                     environment: ["PGOPTIONS": "-c search_path=public"])
        #expect(named.status == 0, "\(named.stderr)")
        #expect(named.stdout == "2\n", "\(named.stdout)")
        let control = try sandbox.opsh(["-e", "return projects.count()"], on: database,
                                       environment: ["PGOPTIONS": "-c search_path=decoy"])
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "0\n", "\(control.stdout)")
    }

    // MARK: opsh's functions inside a script's statement (migration 008)

    /// `evil.clock_timestamp()` a thousand years ahead: the permit trigger,
    /// which fires inside the script's INSERT and so under its path, took
    /// a permit dated now for one a day old, and the script's DELETE then
    /// emptied the trail. The control is the function as migration 003
    /// made it.
    @Test func aClockFirstOnTheSearchPathDoesNotForgeAPrunePermit() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        #expect(try sandbox.opsh(["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"], on: database).status == 0)
        try database.sql("""
            CREATE SCHEMA evil;
            CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '3000-01-01'::pg_catalog.timestamptz $$;
            """)
        let attack = ["-e", """
            \(Self.path)
            db.exec('INSERT INTO opsh_audit_prune VALUES (extract(epoch FROM now()) + 60)')
            return (db.exec('DELETE FROM opsh_audit'))
            """]
        let refused = try sandbox.opsh(attack, on: database)
        #expect(refused.status == 1, "\(refused.stdout)")
        #expect(refused.stderr.contains("an audit prune permit must be at least a day in the past"), "\(refused.stderr)")
        #expect(try database.count("public.opsh_audit_prune") == 0)
        #expect(try database.count("public.opsh_audit") >= 1)

        try database.sql("ALTER FUNCTION opsh_audit_refuse_recent_permit() RESET search_path")
        let forged = try sandbox.opsh(attack, on: database)
        #expect(forged.status == 0, "\(forged.stderr)")
        #expect(forged.stdout != "0\n", "\(forged.stdout)")
    }

    /// An aggregate `evil.count(*)` that counts nothing: the TRUNCATE
    /// trigger counted the table's rows under the script's path, so 20
    /// rows went past `--max-changes 5` and `--dry-run` called them none.
    /// The control is the function without its own path.
    @Test func aCountFirstOnTheSearchPathDoesNotHideATruncate() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
            SELECT 'com.' || g, 'A', 'A', 'u', 0 FROM generate_series(1, 20) g;
            CREATE SCHEMA evil;
            CREATE FUNCTION evil.nothing(bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
            CREATE AGGREGATE evil.count(*) (SFUNC = evil.nothing, STYPE = bigint, INITCOND = '0');
            """)
        let truncate = """
            \(Self.path)
            print('read', db.value('SELECT count(*) FROM projects'))
            db.exec('TRUNCATE projects CASCADE')
            """
        let capped = try sandbox.opsh(["--max-changes", "5", "-e", truncate], on: database)
        #expect(capped.status == 1, "\(capped.stdout)")
        #expect(capped.stdout == "read\t0\n", "the script reads its own count: \(capped.stdout)")
        #expect(capped.stderr.contains("more than its limit of 5"), "\(capped.stderr)")
        #expect(capped.stderr.contains("projects: 20 deleted"), "\(capped.stderr)")
        #expect(try database.count("public.projects") == 20)

        let dry = try sandbox.opsh(["--dry-run", "-e", truncate], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("projects: 0 inserted, 0 updated, 20 deleted"), "\(dry.stderr)")
        #expect(try database.count("public.projects") == 20)

        try database.sql("ALTER FUNCTION opsh_note_truncate() RESET search_path")
        let unseen = try sandbox.opsh(["--max-changes", "5", "-e", truncate], on: database)
        #expect(unseen.status == 0, "\(unseen.stderr)")
        #expect(try database.count("public.projects") == 0)
    }

    /// A domain `evil.json` over text: the JSON check, evaluated for the
    /// script's INSERT under its path, cast to it and let any text pass.
    /// The control is the check function as migration 001 made it.
    @Test func aJSONTypeFirstOnTheSearchPathDoesNotPassInvalidJSON() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("CREATE SCHEMA evil; CREATE DOMAIN evil.json AS text;")
        let insert = ["-e", """
            \(Self.path)
            print(db.value("SELECT '{not json'::json::text"))
            db.exec("INSERT INTO telemetry (event, properties, created_at) VALUES ('e', '{not json', 1)")
            """]
        let refused = try sandbox.opsh(insert, on: database)
        #expect(refused.status == 1, "\(refused.stdout)")
        #expect(refused.stdout == "{not json\n", "the script's own cast is to its type: \(refused.stdout)")
        #expect(refused.stderr.contains("properties_is_json"), "\(refused.stderr)")
        #expect(try database.count("public.telemetry") == 0)

        try database.sql("""
            CREATE OR REPLACE FUNCTION opsh_json_valid(document text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
            BEGIN PERFORM document::json; RETURN true; EXCEPTION WHEN others THEN RETURN false; END $$;
            """)
        let passed = try sandbox.opsh(insert, on: database)
        #expect(passed.status == 0, "\(passed.stderr)")
        #expect(try database.count("public.telemetry") == 1)
    }

    /// A deferred trigger of the script's own table that moves the
    /// session's path (`set_config('search_path', …, false)`) fires at the
    /// COMMIT opsh sends for `db.transaction`, after an own statement
    /// pinned the path in it: the script's next read finds its `=` (the
    /// control: the trigger moves the path, and the `projects.delete` after
    /// a transaction without an own statement deletes one project), and
    /// the `projects.delete` right after the transaction with one deletes
    /// one project too, not every one.
    @Test func aDeferredTriggerThatMovesThePathAtCommitDoesNotSteerTheNextOwnStatement() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql(Self.insertTwo)
        try database.sql(Self.evilEquals)
        try database.sql("""
            CREATE TABLE public.flip (x int);
            CREATE FUNCTION public.flip_path() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN PERFORM pg_catalog.set_config('search_path', 'evil, pg_catalog, public', false); RETURN NULL; END $$;
            CREATE CONSTRAINT TRIGGER flip AFTER INSERT ON public.flip DEFERRABLE INITIALLY DEFERRED
              FOR EACH ROW EXECUTE FUNCTION public.flip_path();
            """)
        let control = try sandbox.opsh(["-e", """
            db.transaction(function() db.exec('INSERT INTO flip VALUES (1)') end)
            print(db.value('SELECT count(*) FROM projects WHERE bundleIdentifier = ?', 'nobody'))
            print(projects.delete('com.a'))
            """], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "2\ntrue\n", "the trigger moves the path: \(control.stdout)")
        #expect(try database.sql("SELECT bundleIdentifier FROM public.projects") == "com.b")

        try database.sql(Self.insertAC)
        let attack = try sandbox.opsh(["-e", """
            db.transaction(function()
              db.exec('INSERT INTO flip VALUES (1)')
              print(projects.get('com.b').name)
            end)
            print(projects.delete('com.a'))
            """], on: database)
        #expect(attack.status == 0, "\(attack.stderr)")
        #expect(attack.stdout == "B\ntrue\n", "\(attack.stdout)")
        #expect(try database.sql("SELECT bundleIdentifier FROM public.projects ORDER BY 1") == "com.b\ncom.c")
    }

    /// `SET LOCAL search_path` in `db.transaction` lasts for the
    /// transaction only, as in psql: the control (no own statement in the
    /// transaction) finds the path as it was after it; with an own
    /// statement between the script's (which pins the path, then puts the
    /// script's back) it is the same, where the step made `staging` the
    /// session's path and the script's next `DELETE FROM t` would have
    /// emptied `staging.t` (28m).
    @Test func aLocalPathEndsWithItsTransactionAroundAnOwnStatement() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql(Self.insertTwo)
        try database.sql("CREATE SCHEMA staging; CREATE TABLE staging.t (x int); CREATE TABLE public.t (x int)")
        func run(_ own: String) throws -> String {
            let run = try sandbox.opsh(["-e", """
                db.transaction(function()
                  db.exec('SET LOCAL search_path = staging')
                  \(own)
                  db.exec('INSERT INTO t VALUES (1)')
                end)
                print(db.value('SHOW search_path'))
                """], on: database)
            #expect(run.status == 0, "\(run.stderr)")
            return run.stdout
        }
        let before = try run("")
        #expect(before == "\"$user\", public\n", "\(before)")
        let around = try run("projects.get('com.a')")
        #expect(around == before, "\(around)")
        #expect(try database.count("staging.t") == 2)

        // A session's `SET` in the transaction outlasts it, with own
        // statements before, in and after it.
        let session = try sandbox.opsh(["-e", """
            projects.get('com.a')
            db.transaction(function()
              db.exec('SET search_path = staging')
              projects.get('com.a')
            end)
            projects.get('com.a')
            print(db.value('SHOW search_path'))
            """], on: database)
        #expect(session.status == 0, "\(session.stderr)")
        #expect(session.stdout == "staging\n", "\(session.stdout)")
    }
}
