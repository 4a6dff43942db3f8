import Foundation
import Testing

/// A write-ahead log that cannot be used: a directory where SQLite's `-wal`
/// or `-shm` file goes. (The tests run as root, for whom permission bits do
/// not stop a write; a directory stops anyone.) opsh says which file is in
/// the way, exits 3, and the database is untouched.
@Suite struct UnwritableWALTests {
    @Test func aDirectoryInPlaceOfTheWALIsNamedAndNothingChanges() throws {
        var refused = 0
        var integrity = "not checked"
        var reads: [String] = []
        for suffix in ["-wal", "-shm"] {
            let scratch = try Scratch()
            let insert = #"projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }"#
            #expect(try scratch.opsh(["-e", insert]).status == 0)
            _ = try scratch.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
            for companion in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: scratch.database + companion) }
            try FileManager.default.createDirectory(atPath: scratch.database + suffix, withIntermediateDirectories: false)
            let before = fileBytes(scratch.database)

            let write = try scratch.opsh(["-e", #"projects.insert{ bundleIdentifier = "com.x", name = "X", gitRepositoryURL = "/x" }"#])
            let named = write.stderr.contains(scratch.database + suffix) && write.stderr.contains("not a regular file")
            #expect(write.status == 3 && named, "\(suffix): exit \(write.status): \(write.stderr)")
            if write.status == 3 && named { refused += 1 }
            // Reading: SQLite can read without a writable -shm (read-only
            // shared memory), not without the -wal: either the right answer
            // or the same clear refusal.
            let read = try scratch.opsh(["--read-only", "-e", "return projects.count()"])
            let readRight = read.status == 0 && read.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1"
            let readRefused = read.status == 3 && read.stderr.contains(scratch.database + suffix)
            #expect(readRight || readRefused, "\(suffix) --read-only: exit \(read.status): \(read.stdout) \(read.stderr)")
            reads.append("\(suffix): \(readRight ? "read" : "refused, naming the file")")
            #expect(fileBytes(scratch.database) == before, "\(suffix): the database file changed")
            try FileManager.default.removeItem(atPath: scratch.database + suffix)
            integrity = try scratch.integrityCheck()
            #expect(try scratch.sqlite("SELECT bundleIdentifier FROM projects") == "com.example.app")
        }
        reportFigure("unusable WAL (a directory in place of -wal or -shm): \(refused)/2 opens for writing refused with exit 3 naming the file; --read-only \(reads.joined(separator: ", ")); database byte-identical, integrity_check afterwards: \(integrity)")
    }
}
