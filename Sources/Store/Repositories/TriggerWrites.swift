import Foundation
import GRDB

/// A trigger wrote a build's scheme or project while opsh created, held or
/// claimed the build: what the build would run is no longer what the
/// operator last set (a trigger planted by anyone with write access can
/// rewrite `buildCommand` whenever a build row changes), so the build does
/// not run, and the transaction that fired the trigger is rolled back
/// (ARCHITECTURE.md, "Build runners and the queue").
///
/// Which rows were written is the engine's own account (on SQLite the
/// row changes GRDB's transaction observers are told of, a trigger's
/// included; on PostgreSQL the transaction's row counters); the triggers
/// named are those the engine's catalog has on `builds`, where every
/// statement of a claim writes.
public struct SchemeChangedByTrigger: Error, CustomStringConvertible, Sendable, Equatable {
    /// The build, when one was claimed (nil while a build was created).
    public var buildId: String?
    public var schemeId: String
    /// The catalog's triggers on builds (opsh's own left out).
    public var triggers: [String]

    public init(buildId: String?, schemeId: String, triggers: [String]) {
        self.buildId = buildId
        self.schemeId = schemeId
        self.triggers = triggers
    }

    public var description: String {
        let named = switch triggers.count {
        case 0: "a trigger"
        case 1: "the trigger \(triggers[0]) on builds"
        default: "one of the triggers on builds (\(triggers.joined(separator: ", ")))"
        }
        let when = buildId.map { "while build \($0) was claimed" } ?? "while a build of it was created"
        return "\(named) changed scheme \(schemeId) or its project \(when): what the build would run is not what was last set, "
            + "so its command was not run; drop or fix the trigger, then set the scheme's command again"
    }
}

/// Counts the rows statements change in a few tables during one
/// transaction on SQLite: GRDB tells transaction observers of every row
/// change of the statements it runs, those a trigger makes included
/// (SQLite's update hook fires for them).
final class TableWriteWatch: TransactionObserver {
    private let tables: Set<String>
    private(set) var changes = 0

    init(tables: Set<String>) {
        self.tables = tables
    }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
        tables.contains(eventKind.tableName.lowercased())
    }

    func databaseDidChange(with event: DatabaseEvent) {
        changes += 1
    }

    func databaseDidCommit(_ db: Database) {}
    func databaseDidRollback(_ db: Database) {}

    /// The tables a claim must not see written: what a build runs.
    static let schemeTables: Set<String> = ["schemes", "projects"]

    /// Runs `body` (in the caller's write transaction); when a trigger
    /// wrote a scheme or project meanwhile, throws ``SchemeChangedByTrigger``
    /// for the build and scheme `subject` names in the result (the
    /// caller's transaction is then rolled back).
    static func refusingSchemeWrites<T>(_ db: Database, subject: (T) -> (build: String?, scheme: String),
                                        _ body: () throws -> T) throws -> T {
        let watch = TableWriteWatch(tables: schemeTables)
        db.add(transactionObserver: watch, extent: .observerLifetime)
        defer { db.remove(transactionObserver: watch) }
        let result = try body()
        guard watch.changes == 0 else {
            let (build, scheme) = subject(result)
            throw SchemeChangedByTrigger(buildId: build, schemeId: scheme, triggers: try triggers(on: "builds", db))
        }
        return result
    }

    /// The triggers SQLite's catalog has on `table` (the database's and
    /// this connection's TEMP ones).
    static func triggers(on table: String, _ db: Database) throws -> [String] {
        try String.fetchAll(db, sql: """
            SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?1 COLLATE NOCASE
            UNION SELECT name FROM sqlite_temp_master WHERE type = 'trigger' AND tbl_name = ?1 COLLATE NOCASE
            ORDER BY name
            """, arguments: [table])
    }
}
