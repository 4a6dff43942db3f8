import Foundation
import Testing

/// A TEMP table named as one of opsh's tables (a repair script's staging
/// copy: `CREATE TEMP TABLE projects AS SELECT * FROM projects`) is found
/// first by an unqualified name, on SQLite and on PostgreSQL (pg_temp comes
/// first on the search path): the repositories' statements name their
/// tables unqualified (scripts/reliability-attacks.md, 27x).
@Suite struct TempTableShadowTests {
    static let update = "db.transaction(function() print(projects.update('com.x.app', { name = 'renamed' }).name) end)"

    /// `projects.update` in a transaction after the copy was made: it says
    /// "renamed", and the project keeps its name (the copy, which goes with
    /// the session, took the write). The control: without the copy the
    /// same update lands.
    @Test(arguments: Engine.allCases) func aTempTableNamedAsAMainTableDoesNotTakeTheRepositoriesWrites(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try database.sql("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('com.x.app', 'X', 'X', 'u', 0)")
        let control = try sandbox.opsh(["-e", Self.update], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stdout == "renamed\n", "\(control.stdout)")
        #expect(try database.sql("SELECT name FROM projects") == "renamed")

        try database.sql("UPDATE projects SET name = 'X'")
        let shadowed = try sandbox.opsh(["-e", "db.exec('CREATE TEMP TABLE projects AS SELECT * FROM projects') " + Self.update],
                                        on: database)
        #expect(shadowed.status == 0, "\(shadowed.stderr)")
        let name = try database.sql("SELECT name FROM projects")
        withKnownIssue("27x, not fixed: the TEMP table takes projects.update's write; the project keeps its name") {
            #expect(name == "renamed", "update said: \(shadowed.stdout)")
        }
    }
}
