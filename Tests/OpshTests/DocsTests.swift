import Foundation
import Testing

/// The documents stay true to the code: docs/lua-api.md is what
/// `scripts/docs` writes from the help entries.
@Suite struct DocsTests {
    /// This checkout.
    static let root: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    static func read(_ path: String) throws -> String {
        try String(contentsOfFile: root + "/" + path, encoding: .utf8)
    }

    /// docs/lua-api.md is what `scripts/docs` writes from
    /// scripts/lua-api-template.md and the help entries (`help{ markdown =
    /// … }` of this build): a help entry or template changed without the
    /// page, or the page edited by hand, fails here with the difference.
    @Test func theLuaAPIPageIsWhatScriptsDocsWrites() throws {
        let sandbox = try Sandbox()
        let check = try sandbox.run("/bin/bash", [Self.root + "/scripts/docs", "--check", "--opsh", opshExecutable])
        #expect(check.status == 0, "\(check.stderr)")
        // Control: a page that differs is refused, saying what to run.
        let page = try Self.read("docs/lua-api.md")
        let copy = sandbox.root + "/copy"
        try FileManager.default.createDirectory(atPath: copy + "/docs", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: copy + "/scripts", withIntermediateDirectories: true)
        for file in ["scripts/docs", "scripts/lua-api.lua", "scripts/lua-api-template.md"] {
            try FileManager.default.copyItem(atPath: Self.root + "/" + file, toPath: copy + "/" + file)
        }
        try page.replacingOccurrences(of: "db.query(sql, ...) → rows", with: "db.query(sql) → rows")
            .write(toFile: copy + "/docs/lua-api.md", atomically: true, encoding: .utf8)
        let stale = try sandbox.run("/bin/bash", [copy + "/scripts/docs", "--check", "--opsh", opshExecutable])
        #expect(stale.status == 1, "\(stale.stderr)")
        #expect(stale.stderr.contains("docs/lua-api.md is not what scripts/docs writes"), "\(stale.stderr)")
        #expect(stale.stderr.contains("+- `db.query(sql, ...) → rows`"), "\(stale.stderr)")
    }
}
