import Foundation
import Testing

/// A TEMP table named as one of opsh's tables (a repair script's staging
/// copy: `CREATE TEMP TABLE projects AS SELECT * FROM projects`) would be
/// found first by an unqualified name, on SQLite and on PostgreSQL (pg_temp
/// comes first on the search path), and on PostgreSQL so would a schema a
/// script put first on the `search_path` (scripts/reliability-attacks.md,
/// 27x). opsh's own statements must reach opsh's tables all the same.
/// SQLite's statement guard refuses the TEMP table; on PostgreSQL opsh's
/// own statements name its tables in their schema (`PostgresHomeSchema`),
/// so the script may have its copy, as in psql, and it takes nothing of
/// opsh's.
@Suite struct TempTableShadowTests {
    static let update = "db.transaction(function() print(projects.update('com.x.app', { name = 'renamed' }).name) end)"

    /// The update lands in opsh's table after the copy: on SQLite the
    /// copy is refused with the reason; on PostgreSQL it is made, and the
    /// script's own statements read it (the shadow is real: without the
    /// qualified names the update would have written it). The controls:
    /// without the copy, and with a copy of another name, the same update
    /// lands.
    @Test(arguments: Engine.allCases) func aTempTableNamedAsAMainTableDoesNotTakeTheRepositoriesWrites(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try database.sql("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('com.x.app', 'X', 'X', 'u', 0)")
        let control = try sandbox.opsh(["-e", Self.update], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "renamed\n", "\(control.stdout)")
        #expect(try database.sql("SELECT name FROM projects") == "renamed")

        try database.sql("UPDATE projects SET name = 'X'")
        let otherName = try sandbox.opsh(["-e", "db.exec('CREATE TEMP TABLE staging AS SELECT * FROM projects') " + Self.update],
                                         on: database)
        #expect(otherName.status == 0, "\(otherName.stderr)")
        #expect(try database.sql("SELECT name FROM projects") == "renamed")

        let refusal = "a TEMP table named projects would stand in for opsh's projects table"
        try database.sql("UPDATE projects SET name = 'X'")
        let shadowed = try sandbox.opsh(["-e", """
            print(pcall(db.exec, 'CREATE TEMP TABLE projects AS SELECT * FROM projects'))
            \(Self.update)
            db.transaction(function() print('read', db.value('SELECT name FROM projects')) end)
            """], on: database)
        #expect(shadowed.status == 0, "\(shadowed.stderr)")
        #expect(shadowed.stdout.contains("renamed\n"), "\(shadowed.stdout)")
        switch engine {
        case .sqlite:
            #expect(shadowed.stdout.contains(refusal), "\(shadowed.stdout)")
            #expect(shadowed.stdout.hasSuffix("read\trenamed\n"), "\(shadowed.stdout)")
        case .postgresql:
            #expect(shadowed.stdout.hasPrefix("true"), "\(shadowed.stdout)")
            #expect(shadowed.stdout.hasSuffix("read\tX\n"), "the script reads its own copy: \(shadowed.stdout)")
        }
        #expect(try database.sql("SELECT name FROM projects") == "renamed", "update said: \(shadowed.stdout)")

        // Inside the transaction too, and as a view.
        try database.sql("UPDATE projects SET name = 'X'")
        let inTransaction = try sandbox.opsh(["-e", """
            db.transaction(function()
              print(pcall(db.exec, 'CREATE TEMP VIEW projects AS SELECT * FROM projects'))
              print(projects.update('com.x.app', { name = 'renamed' }).name)
            end)
            """], on: database)
        #expect(inTransaction.status == 0, "\(inTransaction.stderr)")
        #expect(inTransaction.stdout.contains(refusal) == (engine == .sqlite), "\(inTransaction.stdout)")
        #expect(inTransaction.stdout.hasSuffix("renamed\n"), "\(inTransaction.stdout)")
        #expect(try database.sql("SELECT name FROM projects") == "renamed")
    }

    /// PostgreSQL only (SQLite has no search_path): a schema of the
    /// script's own put first on the path, by `SET`, by `set_config` in a
    /// query, or by a function that sets it for the session, inside and
    /// outside a transaction: the script's own statements then read that
    /// schema's table (the control: the move is real), and the update
    /// after it lands in opsh's table all the same.
    @Test func aSchemaFirstOnTheSearchPathDoesNotTakeTheRepositoriesWrites() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('com.x.app', 'X', 'X', 'u', 0)")
        try database.sql("""
            CREATE SCHEMA s; CREATE TABLE s.projects (LIKE public.projects INCLUDING ALL);
            INSERT INTO s.projects SELECT * FROM public.projects;
            UPDATE s.projects SET name = 'in s';
            CREATE FUNCTION s.take() RETURNS integer LANGUAGE plpgsql SET search_path = s AS $$
              BEGIN PERFORM pg_catalog.set_config('search_path', 's, public', false); RETURN 1; END $$;
            """)
        for attack in ["db.exec('SET search_path = s, public')",
                       "db.value(\"SELECT set_config('search_path', 's, public', false)\")",
                       "db.value('SELECT s.take()')"] {
            try database.sql("UPDATE public.projects SET name = 'X'")
            let moved = try sandbox.opsh(["-e", """
                db.transaction(function()
                  \(attack)
                  print(db.value('SELECT name FROM projects'))
                  print(projects.update('com.x.app', { name = 'renamed' }).name)
                end)
                db.exec('RESET search_path')
                \(attack)
                print(db.value('SELECT name FROM projects'))
                \(Self.update)
                print(projects.get('com.x.app').name)
                """], on: database)
            #expect(moved.status == 0, "\(attack): \(moved.stderr)")
            #expect(moved.stdout == "in s\nrenamed\nin s\nrenamed\nrenamed\n", "\(attack): \(moved.stdout)")
            #expect(try database.sql("SELECT name FROM public.projects") == "renamed", "\(attack): \(moved.stdout)")
            #expect(try database.sql("SELECT name FROM s.projects") == "in s", "\(attack): \(moved.stdout)")
        }
    }

    /// PostgreSQL only: a write `db.send` deferred (a batch the server
    /// runs later) moves the search_path by the function it calls; the
    /// update after it lands in opsh's table, and the script's own read
    /// after it reads the other schema's (the control: the move is real).
    @Test func aDeferredWriteThatMovesTheSearchPathTakesNothingOfOpshs() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('com.x.app', 'X', 'X', 'u', 0)")
        try database.sql("""
            CREATE SCHEMA s; CREATE TABLE s.projects (LIKE public.projects INCLUDING ALL); INSERT INTO s.projects SELECT * FROM public.projects;
            UPDATE s.projects SET name = 'in s'
            """)
        let run = try sandbox.opsh(["-e", """
            local move = "INSERT INTO telemetry (event, created_at) SELECT set_config('search_path', 's, public', false), 1"
            db.transaction(function()
              db.send(move)
              db.send(move)
              print(db.value('SELECT name FROM projects'))
              print(projects.update('com.x.app', { name = 'renamed' }).name)
            end)
            """], on: database)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "in s\nrenamed\n", "\(run.stdout)")
        #expect(try database.sql("SELECT name FROM public.projects") == "renamed")
        #expect(try database.sql("SELECT name FROM s.projects") == "in s")
        #expect(try database.sql("SELECT count(*) FROM public.telemetry") == "2")
    }

    /// Renaming a TEMP table is refused (SQLite does not tell its new name
    /// before it runs), as a TEMP view named as an opsh table is; the
    /// controls (a TEMP view of another name, a TEMP table kept under its
    /// name) run.
    @Test func aTempTableCannotBeRenamedIntoOpshsTablesOnSQLite() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        let control = try sandbox.opsh(["-e", """
            db.exec('CREATE TEMP TABLE staging (a)') db.exec('CREATE TEMP VIEW recent AS SELECT 1') print(db.value('SELECT count(*) FROM recent'))
            """], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "1\n", "\(control.stdout)")

        let renamed = try sandbox.opsh(["-e", "db.exec('CREATE TEMP TABLE staging (a)') db.exec('ALTER TABLE staging RENAME TO projects')"],
                                       on: database)
        #expect(renamed.status != 0)
        #expect(renamed.stderr.contains("renaming a TEMP table is refused"), "\(renamed.stderr)")

        let view = try sandbox.opsh(["-e", "db.exec('CREATE TEMP VIEW Projects AS SELECT 1')"], on: database)
        #expect(view.status != 0)
        #expect(view.stderr.contains("a TEMP table named projects would stand in for opsh's projects table"), "\(view.stderr)")
    }

    /// A TEMP table named as the migrations' records is refused too:
    /// `migrate.up` names `opsh_lua_migrations` (and GRDB's
    /// `grdb_migrations`) unqualified, and a TEMP one took the migration's
    /// checksum, which went with the session: the next `migrate.up` failed,
    /// "applied but has no recorded checksum" (28b). The control: the same
    /// run with a TEMP table of another name records the checksum, and the
    /// next run finds nothing to apply. SQLite only: PostgreSQL's TEMP
    /// tables are 27x's other half.
    @Test func aTempTableNamedAsTheMigrationsRecordsIsRefusedOnSQLite() throws {
        func migrate(after temporaryTable: String) throws -> (first: Sandbox.Result, second: Sandbox.Result, recorded: String) {
            let sandbox = try Sandbox()
            let folder = sandbox.root + "/migrations"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try #"return { id = "010_owner", up = function(db) db.exec("ALTER TABLE projects ADD COLUMN owner TEXT") end }"#
                .write(toFile: folder + "/010_owner.lua", atomically: true, encoding: .utf8)
            let database = try sandbox.createdDatabase(.sqlite)
            let create = "CREATE TEMP TABLE \(temporaryTable) (identifier TEXT NOT NULL PRIMARY KEY, checksum TEXT NOT NULL, applied_at REAL NOT NULL)"
            let first = try sandbox.opsh(["-e", "print(pcall(db.exec, '\(create)')) print(#migrate.up{ folder = '\(folder)' })"], on: database)
            let second = try sandbox.opsh(["-e", "print(#migrate.up{ folder = '\(folder)' })"], on: database)
            return (first, second, try database.sql("SELECT count(*) FROM opsh_lua_migrations"))
        }
        let control = try migrate(after: "staging")
        #expect(control.first.status == 0 && control.first.stdout == "true\t0\t0\n1\n", "\(control.first.stdout)\(control.first.stderr)")
        #expect(control.second.status == 0 && control.second.stdout == "0\n", "\(control.second.stdout)\(control.second.stderr)")
        #expect(control.recorded == "1")

        let shadowed = try migrate(after: "opsh_lua_migrations")
        #expect(shadowed.first.stdout.hasPrefix("false\t"), "\(shadowed.first.stdout)")
        #expect(shadowed.first.stdout.contains("a TEMP table named opsh_lua_migrations would stand in for opsh's opsh_lua_migrations table"),
                "\(shadowed.first.stdout)")
        #expect(shadowed.second.status == 0 && shadowed.second.stdout == "0\n", "\(shadowed.second.stdout)\(shadowed.second.stderr)")
        #expect(shadowed.recorded == "1", "the checksum went with the session's TEMP table")
    }
}
