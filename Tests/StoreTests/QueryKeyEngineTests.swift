import Foundation
import GRDB
import Testing
@testable import Store

/// Every form of ``QueryKeyGrammar`` fetched on both engines from the same
/// rows gives the same value (issue 23, "One session under both engines":
/// every query key kind works on PostgreSQL). The PostgreSQL database sorts
/// text by a language's rules (an ICU collation, as an operator's server
/// may be set up), so a key that sorts text by the server's default, or
/// orders by SQLite's `rowid`, shows here. The end-to-end half, through
/// `query(...)` in Lua, is OpshTests' QueryKeyValueTests.
@Suite struct QueryKeyEngineTests {
    /// The values a form is given: ids of the seed's rows for its first word.
    static func arguments(for form: QueryKeyGrammar.Form) -> QueryKeyGrammar.Arguments {
        let ids = ["project": "com.example.app", "scheme": "s1", "build": "b3", "buildLog": "l1", "crashLog": "c1",
                   "model": "m1", "session": "g1", "config": "eu.west"]
        guard case let .word(first) = form.elements.first else { return .init() }
        return .init(id: ids[first] ?? "", ids: ["s1", "s.2", "S3"], version: "1.2.0", limit: 3, category: "build")
    }

    @Test func everyFormGivesTheSameValueOnBothEngines() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try store.client.write { db in try db.execute(sql: QueryKeyRows.seed) }
        let server = try PostgresServer.shared()
        let url = try server.makeDatabase(icuLocale: "en-US")
        let postgres = try PostgresDatabase(url: url, options: .init(create: true))
        try server.sql(QueryKeyRows.seed, url: url)

        for form in QueryKeyGrammar.forms {
            let key = form.make(Self.arguments(for: form))
            let onSQLite = try store.client.read { db in try key.fetch(db) }
            let onPostgres: StoreValue
            do {
                onPostgres = try key.fetch(postgres)
            } catch {
                Issue.record("\(key) (\(form.pattern)) fails on PostgreSQL: \(error)")
                continue
            }
            #expect(onPostgres == onSQLite, "\(key) (\(form.pattern))")
            // The seed has something for every form: an empty value would compare nothing.
            #expect(onSQLite != .null && onSQLite.arrayValue?.isEmpty != true && onSQLite != .object([]), "\(key) found nothing")
        }
    }
}
