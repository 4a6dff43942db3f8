import Foundation
import GRDB
import GRDBSQLite
import Testing
@testable import Store

/// One key of every form in ``QueryKeyGrammar/forms``, made from the same
/// arguments: every entity the keys name has the id "x" in `seeded(_:)`.
let everyFormsKey: [(pattern: String, key: QueryKey)] = QueryKeyGrammar.forms.map { form in
    (form.pattern, form.make(.init(id: "x", ids: ["x"], version: "1.0", limit: 3, category: "build")))
}

@Suite struct QueryKeyGrammarTests {
    /// Each form's key prints as its pattern filled in, and parses back.
    @Test func everyFormPrintsItsPatternAndParsesBack() throws {
        for (pattern, key) in everyFormsKey {
            let expected = pattern
                .replacingOccurrences(of: "{id},…", with: "x").replacingOccurrences(of: "{id}", with: "x")
                .replacingOccurrences(of: "limit{N}", with: "limit3").replacingOccurrences(of: "category{c}", with: "categorybuild")
            // The version is the one id that is not a plain word.
            let printed = key.description.replacingOccurrences(of: "ids.\"1.0\"", with: "ids.x")
            #expect(printed == expected, "\(pattern)")
            #expect(try QueryKey(parsing: key.description) == key, "\(pattern)")
        }
        #expect(Set(everyFormsKey.map(\.key)).count == QueryKeyGrammar.forms.count, "two forms make the same key")
    }

    /// Completion offers each word of each form at its place.
    @Test func completionOffersEveryWordOfEveryForm() throws {
        for form in QueryKeyGrammar.forms {
            var typed: [String] = []
            for element in form.elements {
                switch element {
                case let .word(word):
                    let offered = QueryKeyGrammar.root.following(typed)?.completions ?? []
                    #expect(offered.contains(word), "\(form.pattern): '\(word)' after \(typed)")
                    typed.append(word)
                case let .value(slot):
                    typed.append((slot.prefix ?? "") + "x")
                }
            }
        }
        #expect(QueryKeyGrammar.root.following(["project", "x", "latestBuilds"])?.completions == ["limit5", "limit10", "limit20"])
        #expect(QueryKeyGrammar.root.following(["build", "x", "logs", "ids"])?.completions == ["debug", "category"])
        #expect(QueryKeyGrammar.root.following(["build", "x", "nope"]) == nil)
    }

    @Test func aBadWordAfterDebugSaysOnlyACategoryMayFollow() {
        #expect(throws: QueryKeyError(key: "build.x.logs.ids.debug.debug", position: 24,
                                      expected: "category{c}, e.g. categorybuild or category\"unit tests\", found 'debug'")) {
            try QueryKey(parsing: "build.x.logs.ids.debug.debug")
        }
    }

    // MARK: Observed tables

    /// For each form, the tables a `watch` of its key observes are exactly
    /// those its fetch reads, as SQLite's authorizer reports them
    /// (SQLITE_READ, also for a table read without a column, as count(*)):
    /// a table read but not observed would miss changes, one observed but
    /// not read would wake the watch for nothing.
    @Test func eachKeyObservesExactlyTheTablesItsFetchReads() throws {
        let directory = try TemporaryDirectory()
        let path = directory.file("keys.sqlite")
        try seeded(Store.open(path: path))
        for (pattern, key) in everyFormsKey {
            let read = try tablesRead(path: path) { db in _ = try key.fetch(db) }
            #expect(read == key.observedTables, "\(pattern): reads \(read.sorted()), observes \(key.observedTables.sorted())")
        }
    }

    /// Rows with id "x" for every key to find, so that no fetch stops early
    /// (a missing project or configuration skips the rest of its reads).
    private func seeded(_ store: Store) throws {
        try store.client.write { db in
            try db.execute(sql: """
                INSERT INTO projects VALUES ('x', 'x', 'X', '/srv/x', 1);
                INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('x', 'x', 'X');
                INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('x', 'x', '1.0', 1, 1);
                INSERT INTO buildLogs (id, buildId, category, content, createdAt) VALUES ('x', 'x', 'build', 'cc', 1);
                INSERT INTO crashLogs (incidentIdentifier, buildId, content, createdAt) VALUES ('x', 'x', 'segv', 1);
                INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES ('x', 'X', 'gguf', 'llama.cpp', 1, 1);
                INSERT INTO model_usage_stats (model_id, day) VALUES ('x', '2024-01-01');
                INSERT INTO generation_sessions (id, model_id, created_at, updated_at) VALUES ('x', 'x', 1, 1);
                INSERT INTO generations (id, session_id, sequence_number, created_at) VALUES ('x', 'x', 1, 1);
                INSERT INTO telemetry (event, created_at) VALUES ('open', 1);
                INSERT INTO configuration (id, base_url, created_at, updated_at) VALUES ('x', 'https://x', 1, 1);
                INSERT INTO configuration (id, base_url, created_at, updated_at) VALUES ('default', 'https://x', 1, 1);
                """)
        }
    }

    /// The tables of the main database that `body`'s statements read, on a
    /// connection of its own (so every statement is prepared, and authorized,
    /// afresh).
    private func tablesRead(path: String, _ body: (Database) throws -> Void) throws -> Set<String> {
        final class Reads { var tables: Set<String> = [] }
        let reads = Reads()
        let queue = try DatabaseQueue(path: path)
        try queue.inDatabase { db in
            sqlite3_set_authorizer(db.sqliteConnection, { context, action, table, _, database, _ in
                if action == SQLITE_READ, let table, let database, String(cString: database) == "main" {
                    Unmanaged<Reads>.fromOpaque(context!).takeUnretainedValue().tables.insert(String(cString: table))
                }
                return SQLITE_OK
            }, Unmanaged.passUnretained(reads).toOpaque())
            defer { sqlite3_set_authorizer(db.sqliteConnection, nil, nil) }
            try body(db)
        }
        return reads.tables.filter { !$0.hasPrefix("sqlite_") }
    }
}
