import Foundation
import Testing

/// The database on a tmpfs remounted read-only: opening it to write is
/// refused at once with the reason (exit 3), and `--read-only` reads it,
/// with or without the WAL's companion files.
@Suite(.serialized) struct ReadOnlyFileSystemTests {
    @Test(.enabled(if: TmpfsMount.permitted, TmpfsMount.skipReason))
    func writesAreRefusedWithTheReasonAndReadOnlyReads() throws {
        let scratch = try Scratch()
        let mount = try TmpfsMount(on: scratch.root + "/data", size: "8m")
        defer { mount.unmount() }
        let insert = #"projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }"#
        #expect(try scratch.opsh(["-e", insert]).status == 0)
        let count = "return projects.count()"
        var cases: [String] = []

        // Two states of the folder: as opsh leaves it (-wal and -shm
        // there), and as a clean close by the last connection leaves it
        // (no -wal, no -shm: SQLite would need to create -shm to read).
        for companions in [true, false] {
            try mount.remountReadWrite()
            if !companions {
                _ = try scratch.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
                for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: scratch.database + suffix) }
            }
            #expect(FileManager.default.fileExists(atPath: scratch.database + "-shm") == companions)
            try mount.remountReadOnly()
            let before = fileBytes(scratch.database)

            let write = try scratch.opsh(["-e", #"projects.insert{ bundleIdentifier = "com.x", name = "X", gitRepositoryURL = "/x" }"#])
            #expect(write.status == 3, "exit \(write.status): \(write.stderr)")
            #expect(write.stderr.contains("read-only file system") && write.stderr.contains("--read-only"), "\(write.stderr)")
            // Even a script that only reads is refused without --read-only:
            // opsh would otherwise promise writes it cannot make.
            #expect(try scratch.opsh(["-e", count]).status == 3)

            let read = try scratch.opsh(["--read-only", "-e", count])
            #expect(read.status == 0, "exit \(read.status): \(read.stderr)")
            #expect(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "\(read.stdout)")
            let sneaky = try scratch.opsh(["--read-only", "-e", #"db.exec("DELETE FROM projects")"#])
            // SQLite refuses it ("attempt to write a readonly database", or
            // "unable to open database file" when opened as immutable).
            #expect(sneaky.status != 0 && sneaky.stderr.contains("SQL error"), "\(sneaky.status) \(sneaky.stderr)")
            #expect(fileBytes(scratch.database) == before)
            cases.append("\(companions ? "with" : "without") -wal/-shm: write exit \(write.status), --read-only read exit \(read.status)")
        }
        try mount.remountReadWrite()
        let integrity = try scratch.integrityCheck()
        #expect(try scratch.sqlite("SELECT bundleIdentifier FROM projects") == "com.example.app")
        reportFigure("read-only file system: " + cases.joined(separator: "; ") + "; the file unchanged, integrity_check \(integrity)")
    }
}
