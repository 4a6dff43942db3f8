import Foundation
import Testing
@testable import Store

/// The spool of audit rows waiting to be written (issue 24, item 15):
/// a row goes only to its own database, and two runs writing the spool at
/// once do not both take the same row.
@Suite struct AuditSpoolTests {
    static func entry(_ code: String) -> AuditEntry {
        AuditEntry(startedAt: 1, endedAt: 2, mode: .eval, code: code, status: 0)
    }

    @Test func aRowIsClaimedOnceAndOnlyForItsDatabase() throws {
        let directory = TemporaryDirectory()
        let spool = AuditSpool(directory: directory.file("spool"))
        try spool.keep(Self.entry("return 1"), database: "sqlite 1-2")
        try spool.keep(Self.entry("return 2"), database: "sqlite 9-9")
        let mode = try FileManager.default.attributesOfItem(atPath: directory.file("spool"))[.posixPermissions] as? Int
        #expect(mode == 0o700)

        let claimed = spool.claimPending(database: "sqlite 1-2")
        #expect(claimed.map(\.entry.code) == ["return 1"])
        #expect(claimed.first?.file.hasSuffix(".json.\(getpid())") == true)
        // Claimed by a live process (this one, as another run would see it
        // under its own pid): not handed out again.
        let renamed = claimed[0].file.replacingOccurrences(of: ".\(getpid())", with: ".1")   // pid 1 is alive
        #expect(rename(claimed[0].file, renamed) == 0)
        #expect(spool.claimPending(database: "sqlite 1-2").isEmpty)
        // Given back: claimed again.
        #expect(rename(renamed, claimed[0].file) == 0)
        spool.release(claimed[0].file)
        let again = spool.claimPending(database: "sqlite 1-2")
        #expect(again.count == 1)
        spool.remove(again[0].file)
        #expect(spool.claimPending(database: "sqlite 1-2").isEmpty)
        // The other database's row is still there, untouched.
        #expect(spool.claimPending(database: "sqlite 9-9").map(\.entry.code) == ["return 2"])
    }

    /// Files the spool did not make are neither read nor removed.
    @Test func otherFilesAreLeftAlone() throws {
        let directory = TemporaryDirectory()
        let spool = AuditSpool(directory: directory.file("spool"))
        try spool.keep(Self.entry("return 1"), database: "d")
        let stranger = directory.file("spool") + "/notes.json"
        try Data("{}".utf8).write(to: URL(fileURLWithPath: stranger))
        spool.remove(stranger)
        #expect(FileManager.default.fileExists(atPath: stranger))
        #expect(spool.claimPending(database: "d").count == 1)
    }
}
