import Foundation
import Testing

/// A copy from a file (`db.copy(table, FILE)`, `.import`) that takes past
/// two seconds shows how far it has come on the terminal (stderr), and
/// erases that line when it ends (issue 26).
@Suite struct CopyProgressTests {
    /// SQLite only: the bar follows the bytes of the file read. PostgreSQL
    /// is sent the file in 256 KB pieces, so a small file whose rows the
    /// server checks slowly is all sent at once and shows nothing; a large
    /// one shows what was sent.
    @Test func aLongCopyShowsItsProgressAndErasesIt() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        // About a millisecond to check each row: 3,000 lines take seconds.
        try database.sql("CREATE TABLE slow (id INTEGER PRIMARY KEY, name TEXT CHECK (length(hex(zeroblob(400000))) > 0))")
        let file = try sandbox.script("slow.csv", "id,name\n" + (1...3000).map { "\($0),row number \($0)\n" }.joined())
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "-e", "return db.copy('slow', '\(file)', { header = true })"],
                                          environment: sandbox.environment)
        #expect(terminal.expect("import", timeout: 60))
        #expect(terminal.waitForExit(timeout: 120) == 0, "\(terminal.transcript)")
        #expect(terminal.rawTranscript.contains(" bytes") && terminal.rawTranscript.contains("\r\u{1B}[K3000"),
                "\(terminal.rawTranscript.debugDescription)")
        #expect(try database.count("slow") == 3000)
        // Control: a short copy shows nothing.
        let short = try sandbox.script("short.csv", "id,name\n4001,one\n")
        let quick = try PseudoTerminal(arguments: ["--db", database.db, "-e", "return db.copy('slow', '\(short)', { header = true })"],
                                       environment: sandbox.environment)
        #expect(quick.waitForExit(timeout: 60) == 0)
        #expect(!quick.rawTranscript.contains("import"), "\(quick.rawTranscript.debugDescription)")
    }
}
