import Foundation
import Store
import Testing

/// Regression: `QueryKey.projectLatestBuilds` took any `Int` while the key
/// grammar parses `limit1`…`limit1000000`, so a key built in Swift could
/// print as text that does not parse back. The builder and `fetch` now
/// refuse such a limit with the parser's own error.
@Suite struct QueryKeyLimitTests {
    @Test func limitsInTheGrammarsRangeRoundTrip() throws {
        for limit in [1, 5, 999_999, 1_000_000] {
            let key = try QueryKey.latestBuilds(project: "com.example.app", limit: limit)
            #expect(try QueryKey(parsing: key.description) == key, "limit \(limit)")
        }
    }

    @Test func limitsOutsideItAreRefusedAsTheParserRefusesTheirText() throws {
        for limit in [0, -1, 1_000_001, Int.max, Int.min] {
            let built = Result { () throws(QueryKeyError) in try QueryKey.latestBuilds(project: "com.example.app", limit: limit) }
            guard case let .failure(error) = built else {
                Issue.record("limit \(limit) was accepted: \(built)")
                continue
            }
            #expect(error.description.contains("a whole number from 1 to 1000000 after 'limit'"), "\(error)")
            // The text it names fails to parse, at the same position.
            let text = QueryKey.projectLatestBuilds("com.example.app", limit: limit).description
            #expect(error.key == text)
            do {
                _ = try QueryKey(parsing: text)
                Issue.record("\(text) parsed")
            } catch let parsed as QueryKeyError {
                #expect(parsed.position == error.position, "\(parsed) vs \(error)")
            }
        }
    }

    /// A key made with the enum case directly is refused when fetched
    /// (through a real database file, by the real `opsh`'s store).
    @Test func fetchRefusesAnOutOfRangeLimit() throws {
        let scratch = try Scratch()
        #expect(try scratch.opsh(["-e", "return 1"]).status == 0)
        let store = try Store.open(path: scratch.database, options: StoreOptions(readOnly: true, busyTimeout: 1))
        let wrong = QueryKey.projectLatestBuilds("com.example.app", limit: 1_000_001)
        #expect(throws: QueryKeyError.self) { try store.client.read { try wrong.fetch($0) } }
        let right = try QueryKey.latestBuilds(project: "com.example.app", limit: 1_000_000)
        #expect(try store.client.read { try right.fetch($0) } == .array([]))
    }
}
