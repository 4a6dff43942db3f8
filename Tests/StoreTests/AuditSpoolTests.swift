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

    /// Every field of a row comes back from its file as it was kept.
    @Test func aKeptRowComesBackWhole() throws {
        let directory = TemporaryDirectory()
        let spool = AuditSpool(directory: directory.file("spool"))
        let full = AuditEntry(startedAt: 1_700_000_000.25, endedAt: 1_700_000_001, mode: .run, script: "/srv/job \"1\".lua",
                              scriptSHA256: String(repeating: "a", count: 64), code: "db.exec('x')\n\u{1}", reason: "INC-1 ✓",
                              dryRun: true, readOnly: true,
                              changes: ["builds": .init(inserted: 1, updated: 2, deleted: 3), "telemetry": .init(deleted: 9)],
                              status: -4, period: 0.5, user: "cron", host: "ci-1", pid: 42, version: "0.16.0")
        let bare = AuditEntry(startedAt: 3, endedAt: 4, mode: .eval, status: 0, user: "u", host: "h", pid: 1, version: "v")
        try spool.keep(full, database: "sqlite 1-2")
        try spool.keep(bare, database: "sqlite 1-2")
        #expect(spool.claimPending(database: "sqlite 1-2").map(\.entry) == [bare, full].sorted { $0.startedAt < $1.startedAt })
    }

    /// A file an earlier opsh kept (Foundation's encoder: members in any
    /// order, `/` escaped, a whole number of seconds without a fraction,
    /// absent fields left out) is still read, and only for its database.
    @Test func aFileAnEarlierOpshKeptIsRead() throws {
        let directory = TemporaryDirectory()
        let spool = AuditSpool(directory: directory.file("spool"))
        try FileManager.default.createDirectory(atPath: directory.file("spool"), withIntermediateDirectories: true)
        let earlier = #"{"status":0,"changes":{"builds":{"updated":0,"inserted":1,"deleted":0}},"dryRun":false,"user":"cron","#
            + #""mode":"run","host":"ci-1","endedAt":1700000001.5,"database":"sqlite 1-2","pid":42,"version":"0.16.0","#
            + #""startedAt":1700000000,"readOnly":false,"script":"\/srv\/job.lua","code":"db.exec('x')\n"}"#
        try Data(earlier.utf8).write(to: URL(fileURLWithPath: directory.file("spool") + "/" + UUID().uuidString + ".json"))
        #expect(spool.claimPending(database: "sqlite 9-9").isEmpty)
        let claimed = spool.claimPending(database: "sqlite 1-2")
        #expect(claimed.map(\.entry) == [AuditEntry(startedAt: 1_700_000_000, endedAt: 1_700_000_001.5, mode: .run,
                                                    script: "/srv/job.lua", code: "db.exec('x')\n",
                                                    changes: ["builds": .init(inserted: 1)], status: 0,
                                                    user: "cron", host: "ci-1", pid: 42, version: "0.16.0")])
    }
}
