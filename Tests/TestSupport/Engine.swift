import Foundation

/// The two database engines opsh runs on. A promise both engines make is
/// tested by one body that takes the engine as its argument
/// (`@Test(arguments: Engine.allCases) func …(_ engine: Engine)`), so the
/// two can never drift apart; a promise only one engine keeps says why in
/// its test.
public enum Engine: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite
    case postgresql

    public var description: String { rawValue }
}

/// One test's database on one engine: the `--db` value opsh is given, and
/// SQL from another process (the `sqlite3` CLI, or `psql`) to set it up and
/// to check what opsh left in it.
public struct TestDatabase: Sendable, CustomStringConvertible {
    public let engine: Engine
    /// A file path (SQLite) or a `postgresql://` URL.
    public let db: String

    public init(engine: Engine, db: String) {
        self.engine = engine
        self.db = db
    }

    /// A new, empty database of `engine` for one test: a path under
    /// `folder` (the file is made by opsh's `--create`), or a database of
    /// its own on the test process's PostgreSQL server. A server that
    /// cannot start throws its reason: the test fails, not the process.
    /// `icuLocale` sorts the PostgreSQL database's text by a language's
    /// rules (``PostgresServer/makeDatabase(icuLocale:)``); SQLite sorts
    /// by bytes whatever it is.
    public static func empty(_ engine: Engine, in folder: String, icuLocale: String? = nil) throws -> TestDatabase {
        switch engine {
        case .sqlite:
            return TestDatabase(engine: .sqlite, db: folder + "/data/test.sqlite")
        case .postgresql:
            return TestDatabase(engine: .postgresql, db: try PostgresServer.shared().makeDatabase(icuLocale: icuLocale))
        }
    }

    /// Runs `text` from another process and returns its trimmed output
    /// (rows one a line, columns separated by `|`, as both CLIs print
    /// them unaligned). Throws with the CLI's message when it fails.
    @discardableResult
    public func sql(_ text: String) throws -> String {
        switch engine {
        case .sqlite: try sqlite3CLI(db, text)
        case .postgresql: try PostgresServer.shared().sql(text, url: db)
        }
    }

    /// The count `SELECT count(*) FROM table` gives.
    public func count(_ table: String, where condition: String = "1=1") throws -> Int {
        Int(try sql("SELECT count(*) FROM \(table) WHERE \(condition)")) ?? -1
    }

    public var description: String { engine.rawValue }
}

extension TestFolder {
    /// A new database of `engine` with opsh's schema (`opsh --create`),
    /// for one test: this folder's SQLite file, or a database of its own on
    /// the PostgreSQL server.
    public func createdDatabase(_ engine: Engine, icuLocale: String? = nil) throws -> TestDatabase {
        let database = try TestDatabase.empty(engine, in: root, icuLocale: icuLocale)
        let created = try opsh(["--create", "-e", "return db.engine"], on: database)
        guard created.status == 0, created.stdout.contains(engine.rawValue) else {
            throw ShellError(script: "opsh --db \(database.db) --create", output: created.stderr + created.stdout)
        }
        return database
    }

    /// opsh with `--db` to `database` (after a subcommand: `run --db X
    /// FILE`), in this folder's environment plus `environment`.
    public func opsh(_ arguments: [String], on database: TestDatabase, stdin: String? = nil,
                     environment extra: [String: String] = [:]) throws -> Result {
        let withDatabase: [String] = arguments.first.map { ["run", "runs", "runner", "runners", "migrate"].contains($0) } == true
            ? [arguments[0], "--db", database.db] + arguments.dropFirst()
            : ["--db", database.db] + arguments
        return try ChildProcess.start(opshExecutable, withDatabase, environment: environment.merging(extra) { $1 },
                                      stdin: stdin).finish()
    }
}

