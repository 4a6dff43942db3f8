import Foundation
import Testing

/// A TEMP table named as one of opsh's tables (a repair script's staging
/// copy: `CREATE TEMP TABLE projects AS SELECT * FROM projects`) would be
/// found first by an unqualified name, on SQLite and on PostgreSQL (pg_temp
/// comes first on the search path): the repositories' statements name their
/// tables unqualified (scripts/reliability-attacks.md, 27x). SQLite's
/// statement guard refuses it; PostgreSQL is not fixed yet.
@Suite struct TempTableShadowTests {
    static let update = "db.transaction(function() print(projects.update('com.x.app', { name = 'renamed' }).name) end)"

    /// The copy is refused with the reason, and the update after it lands.
    /// The controls: without the copy, and with a copy of another name,
    /// the same update lands.
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

        try database.sql("UPDATE projects SET name = 'X'")
        let shadowed = try sandbox.opsh(["-e", "print(pcall(db.exec, 'CREATE TEMP TABLE projects AS SELECT * FROM projects')) " + Self.update],
                                        on: database)
        let name = try database.sql("SELECT name FROM projects")
        withKnownIssue("27x, not fixed on PostgreSQL: the TEMP table takes projects.update's write") {
            #expect(shadowed.stdout.contains("a TEMP table named projects would stand in for opsh's projects table"), "\(shadowed.stdout)")
            #expect(name == "renamed", "update said: \(shadowed.stdout)")
        } when: { engine == .postgresql }
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
}
