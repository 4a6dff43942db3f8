import Foundation
import Testing

/// A full disk, simulated by a file-size limit (`ulimit -f`) on the opsh
/// process: the write fails with a clear error, and the database stays
/// sound with every transaction whole or absent.
@Suite struct FaultTests {
    static let setup = """
        db.exec("CREATE TABLE fill (id INTEGER PRIMARY KEY, b BLOB NOT NULL)")
        """

    /// Runs opsh under `ulimit -f` (in 512-byte blocks, as dash counts), with
    /// SIGXFSZ ignored (writes then fail with EFBIG) or not (the signal kills opsh).
    static func runLimited(_ scratch: Scratch, blocks: Int, ignoreSignal: Bool, script: String) throws -> Scratch.Result {
        let command = (ignoreSignal ? "trap '' XFSZ; " : "") + "ulimit -f \(blocks); exec \"$0\" \"$@\""
        return try scratch.run("/bin/sh", ["-c", command, opshExecutable] + scratch.withDatabase(["run", "--no-lock", script]))
    }

    static func prepared() throws -> (Scratch, blocks: Int) {
        let scratch = try Scratch()
        let created = try scratch.opsh(["-e", setup])
        #expect(created.status == 0, "\(created.stderr)")
        _ = try scratch.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
        let size = (try? FileManager.default.attributesOfItem(atPath: scratch.database)[.size] as? Int) ?? 0
        // Room for about 1 MiB more than the file holds now.
        return (scratch, (size + (1 << 20)) / 512)
    }

    @Test func oneBigTransactionOnAFullDiskIsRolledBack() throws {
        let (scratch, blocks) = try Self.prepared()
        let script = try scratch.script("big.lua", """
            db.transaction(function()
              for i = 1, 1000 do db.exec("INSERT INTO fill (b) VALUES (?)", db.blob(string.rep("x", 8192))) end
            end)
            """)
        let result = try Self.runLimited(scratch, blocks: blocks, ignoreSignal: true, script: script)
        // EFBIG reaches SQLite as SQLITE_IOERR ("disk I/O error"): exit 3, database unavailable.
        #expect(result.status == 3, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("disk I/O error") && result.stderr.contains("could not grow: opsh runs under a file-size limit"), "\(result.stderr)")
        let integrity = try scratch.integrityCheck()
        let kept = try scratch.sqlite("SELECT count(*) FROM fill")
        #expect(kept == "0", "rows of the failed transaction kept: \(kept)")
        reportFigure("full disk, one 8 MB transaction under a 1 MiB file-size margin: exit \(result.status), stderr names a disk I/O error and the file-size limit, integrity_check \(integrity), \(kept) of its rows kept")
    }

    @Test func smallCommitsOnAFullDiskKeepEveryCommittedOne() throws {
        for ignoreSignal in [true, false] {
            let (scratch, blocks) = try Self.prepared()
            let script = try scratch.script("small.lua", """
                for i = 1, 100000 do
                  db.exec("INSERT INTO fill (id, b) VALUES (?, ?)", i, db.blob(string.rep("y", 4096)))
                  io.stdout:write(i, "\\n") io.stdout:flush()
                end
                """)
            let result = try Self.runLimited(scratch, blocks: blocks, ignoreSignal: ignoreSignal, script: script)
            let reported = result.stdout.split(separator: "\n").compactMap { Int($0) }.max() ?? 0
            if ignoreSignal {
                #expect(result.status == 3, "\(result.status) \(result.stderr)")
                #expect(result.stderr.contains("disk I/O error") && result.stderr.contains("file-size limit"), "\(result.stderr)")
            } else {
                #expect(result.status == 128 + SIGXFSZ, "\(result.status) \(result.stderr)")
            }
            let integrity = try scratch.integrityCheck()
            let kept = Int(try scratch.sqlite("SELECT count(*) FROM fill")) ?? -1
            let maxID = Int(try scratch.sqlite("SELECT coalesce(max(id), 0) FROM fill")) ?? -1
            #expect(reported > 0 && kept >= reported && kept == maxID && kept <= reported + 1,
                    "reported \(reported) committed, kept \(kept) (max id \(maxID))")
            reportFigure("full disk, autocommit inserts, SIGXFSZ \(ignoreSignal ? "ignored" : "default (kills)"): exit \(result.status), \(reported) reported committed, \(kept) kept, \(max(0, reported - kept)) lost, integrity_check \(integrity)")
        }
    }
}
