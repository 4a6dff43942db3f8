import Foundation
import Testing
import TestSupport

/// The tests' own PostgreSQL server (TestSupport's PostgresServer): one
/// that cannot start is an error carrying `scripts/pg-server`'s reason,
/// which fails each test that asks for it (`try PostgresServer.shared()`,
/// never `try!`), not the whole test process.
@Suite struct TestServerTests {
    @Test func aServerThatCannotStartThrowsItsReason() throws {
        // A folder that cannot be made: below a file.
        let file = NSTemporaryDirectory() + "opsh-not-a-folder-" + UUID().uuidString
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let error = #expect(throws: ShellError.self) { try PostgresServer.start(in: file + "/pg", listen: []) }
        #expect(error?.output.contains("Not a directory") == true, "\(String(describing: error))")
        // Control: the shared server starts, and answers.
        #expect(try PostgresServer.shared().sql("SELECT 1") == "1")
    }
}
