import Foundation
import Jobs
import Testing

/// The records in `.opsh-workspaces` that say which folders opsh made
/// (ARCHITECTURE.md, "Build runners and the queue"): what one opsh writes
/// the next one reads, records an earlier opsh wrote included, and only
/// the records of this database are its own.
@Suite struct WorkspaceRecordTests {
    private func fields(_ owners: [Workspaces.Owner]) -> [[String]] {
        owners.map { [$0.database, $0.build, $0.scheme, $0.folder] }.sorted { $0.lexicographicallyPrecedes($1) }
    }

    @Test func aRecordIsReadBackAndOnlyForItsDatabase() throws {
        let directory = TemporaryDirectory()
        let root = directory.file("workspaces")
        let mine = Workspaces(root: root, database: "/srv/opsh \"a\".sqlite")
        let theirs = Workspaces(root: root, database: "postgresql://opsh@db/opsh")
        try mine.recordOwner(of: mine.path(for: "b1"), build: "b1", scheme: "s/1 ✓")
        try mine.recordOwner(of: mine.path(for: "../b2"), build: "../b2", scheme: "s2")
        try theirs.recordOwner(of: theirs.path(for: "b3"), build: "b3", scheme: "s3")
        #expect(fields(mine.owned()) == [
            ["/srv/opsh \"a\".sqlite", "../b2", "s2", Workspaces.folderName(for: "../b2")],
            ["/srv/opsh \"a\".sqlite", "b1", "s/1 ✓", "b1"],
        ])
        #expect(fields(theirs.owned()) == [["postgresql://opsh@db/opsh", "b3", "s3", "b3"]])
    }

    /// A record as an earlier opsh wrote it (Foundation's encoder: members
    /// in any order, `/` escaped) is read; one that names another folder
    /// than its own file, or is not a record, is not.
    @Test func aRecordAnEarlierOpshWroteIsRead() throws {
        let directory = TemporaryDirectory()
        let root = directory.file("workspaces")
        let records = root + "/.opsh-workspaces"
        try FileManager.default.createDirectory(atPath: records, withIntermediateDirectories: true)
        func write(_ name: String, _ text: String) throws {
            try Data(text.utf8).write(to: URL(fileURLWithPath: records + "/" + name))
        }
        try write("b1", #"{"scheme":"s1","folder":"b1","build":"b1","database":"\/srv\/opsh.sqlite"}"#)
        try write("b2", #"{"scheme":"s2","folder":"b1","build":"b2","database":"\/srv\/opsh.sqlite"}"#)
        try write("b3", #"{"scheme":"s3","folder":"b3","build":"b3"}"#)
        try write("b4", "not a record")
        let workspaces = Workspaces(root: root, database: "/srv/opsh.sqlite")
        #expect(fields(workspaces.owned()) == [["/srv/opsh.sqlite", "b1", "s1", "b1"]])
    }
}
