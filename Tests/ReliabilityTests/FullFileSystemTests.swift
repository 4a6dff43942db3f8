import Foundation
import Testing

/// A really full file system: the database on a small tmpfs, written until
/// the kernel answers ENOSPC. (`FaultTests` covers a file-size limit.)
@Suite(.serialized) struct FullFileSystemTests {
    /// The scratch folder's `data/` (where the database lives) on a 4 MiB
    /// tmpfs, with a migrated database holding 50 committed rows and a
    /// 512 KiB ballast file that the test can delete to free room.
    static func prepared() throws -> (Scratch, TmpfsMount) {
        let scratch = try Scratch()
        let mount = try TmpfsMount(on: scratch.root + "/data", size: "4m")
        let created = try scratch.opsh(["-e", """
            db.exec("CREATE TABLE fill (id INTEGER PRIMARY KEY, b BLOB NOT NULL)")
            db.transaction(function()
              for i = 1, 50 do db.exec("INSERT INTO fill (id, b) VALUES (?, ?)", i, db.blob(string.rep("c", 4096))) end
            end)
            """])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(FileManager.default.createFile(atPath: scratch.root + "/data/ballast", contents: Data(count: 512 << 10)))
        return (scratch, mount)
    }

    @Test(.enabled(if: TmpfsMount.permitted, TmpfsMount.skipReason))
    func writesUntilENOSPCLoseNothingCommittedAndKeepNoPartOfTheFailedTransaction() throws {
        let (scratch, mount) = try Self.prepared()
        defer { mount.unmount() }
        var integrity = "not checked"

        // 1. One transaction bigger than the file system: refused whole.
        let big = try scratch.opsh(["-e", """
            db.transaction(function()
              for i = 1001, 2000 do db.exec("INSERT INTO fill (id, b) VALUES (?, ?)", i, db.blob(string.rep("t", 8192))) end
            end)
            """])
        #expect(big.status == 3, "exit \(big.status): \(big.stderr)")
        #expect(big.stderr.contains("database or disk is full"), "\(big.stderr)")
        integrity = try scratch.integrityCheck()
        #expect(try scratch.sqlite("SELECT count(*) FROM fill WHERE id <= 50") == "50")
        let partial = try scratch.sqlite("SELECT count(*) FROM fill WHERE id > 1000")
        #expect(partial == "0", "rows of the failed transaction kept: \(partial)")

        // 2. Autocommit inserts, each printed once committed, until the disk is full.
        let script = try scratch.script("small.lua", """
            for i = 5001, 100000 do
              db.exec("INSERT INTO fill (id, b) VALUES (?, ?)", i, db.blob(string.rep("a", 4096)))
              io.stdout:write(i, "\\n") io.stdout:flush()
            end
            """)
        let small = try scratch.opsh(["run", "--no-lock", script])
        #expect(small.status == 3, "exit \(small.status): \(small.stderr)")
        #expect(small.stderr.contains("database or disk is full"), "\(small.stderr)")
        let reported = (small.stdout.split(separator: "\n").compactMap { Int($0) }.max() ?? 5000) - 5000
        integrity = try scratch.integrityCheck()
        let kept = Int(try scratch.sqlite("SELECT count(*) FROM fill WHERE id > 5000")) ?? -1
        let maxID = (Int(try scratch.sqlite("SELECT coalesce(max(id), 5000) FROM fill WHERE id > 5000")) ?? -1) - 5000
        // The last insert may have committed before its line was printed.
        #expect(reported > 0 && kept >= reported && kept <= reported + 1 && kept == maxID,
                "reported \(reported) committed, kept \(kept), max id \(maxID)")

        // 3. The full database still opens and reads (a cut-short checkpoint
        //    leaves the main file shorter than its header says).
        let read = try scratch.opsh(["-e", "return db.value('SELECT count(*) FROM fill')"])
        #expect(read.status == 0, "exit \(read.status): \(read.stderr)")
        #expect(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == String(50 + kept), "\(read.stdout)")

        // 4. Room made: writing works again, and nothing was lost.
        try FileManager.default.removeItem(atPath: scratch.root + "/data/ballast")
        let again = try scratch.opsh(["-e", "db.exec('INSERT INTO fill (id, b) VALUES (9999999, x\\'00\\')')"])
        #expect(again.status == 0, "exit \(again.status): \(again.stderr)")
        integrity = try scratch.integrityCheck()
        #expect(try scratch.sqlite("SELECT count(*) FROM fill") == String(50 + kept + 1))

        reportFigure("full tmpfs (ENOSPC): one 8 MB transaction: exit \(big.status), \"database or disk is full\", \(partial) of its rows kept; "
                     + "autocommit: exit \(small.status), \(reported) reported committed, \(kept) kept, \(max(0, reported - kept)) lost; "
                     + "integrity_check after each step: \(integrity); the full database reopens (exit \(read.status)); writable again once room is made (exit \(again.status))")
    }
}
