import Foundation

/// A cron script's slow `db.rows` loop beside the backend (ARCHITECTURE.md,
/// "The row path"): the loop's first rows each take 3 ms of work, so its
/// snapshot grows old and the loop copies the rest of its rows aside and
/// lets the snapshot go. Measured: the backend writer's worst wait while the
/// loop runs, and whether a checkpoint taken mid-loop empties the WAL.
extension BackendBenchmarks {
    /// Rows of the loop that each take `slowWork` seconds of the script's work.
    static let slowRows = 1_000
    static let slowWork = 0.003

    struct RowsLoopFigures {
        var rows: Int
        var seconds: Double
        var commits: Int
        var worst: Double
        var worstLock: Double
        var walLargest: Int64
        /// From the copy's file appearing to a whole checkpoint.
        var snapshotHeld: Double
    }

    static func slowRowsLoop(opsh: String, live: String, environment: [String: String], executable: String,
                             directory: String) throws -> RowsLoopFigures {
        let script = directory + "/slow-rows.lua"
        try """
            local n = 0
            for row in db.rows("SELECT id, event, properties FROM telemetry WHERE session_id LIKE 'demo-%' ORDER BY id") do
              n = n + 1
              if n <= \(slowRows) then local c = os.clock() repeat until os.clock() - c > \(slowWork) end
            end
            print(n)
            """.write(toFile: script, atomically: true, encoding: .utf8)
        let writer = try BackendWriter(executable: executable, path: live, event: "backend-rows-loop", directory: directory)
        defer { writer.endIfRunning() }
        let sampler = FileSizeSampler(path: live + "-wal", interval: 0.002)
        let started = now()
        let loop = try startProcess(opsh, ["run", "--db", live, script], environment: environment, directory: directory)
        // The copy's file (SQLite's etilqs_…, removed as it is opened) in
        // the loop's descriptors: the loop let its snapshot go.
        var copied = false
        while !copied && loop.process.isRunning && now() - started < 60 {
            copied = copyFiles(of: loop.process.processIdentifier) > 0
            if !copied { usleep(1000) }
        }
        let copyBegan = now()
        // While the loop still works: passive checkpoints by another
        // process (they never wait, so never stall the backend), tried
        // until one copies the whole WAL back: nothing pins it any more.
        var checkpoint = "", whole = false
        while !whole && loop.process.isRunning && now() - copyBegan < 30 {
            let said = try runProcess("/usr/bin/sqlite3", ["-bail", live, "PRAGMA wal_checkpoint(PASSIVE);"],
                                      environment: ["PATH": "/usr/bin:/bin"], directory: directory)
            checkpoint = said.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + said.stderr
            let fields = checkpoint.split(separator: "|")
            whole = fields.count == 3 && fields[0] == "0" && fields[1] == fields[2]
        }
        let snapshotHeld = now() - copyBegan
        let stillRunning = loop.process.isRunning
        let ran = loop.finish()
        let seconds = now() - started
        let during = sampler.stop()
        let figures = try writer.stop()

        try require(ran.status == 0, "the slow rows loop failed (exit \(ran.status)): \(ran.stderr)")
        let rows = Int(ran.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        try require(rows == demoRows, "the loop read \(rows) rows, not the snapshot's \(demoRows)")
        try require(copied, "the loop did not copy its rows aside while it ran (copied: \(copied))")
        try require(whole && stillRunning, "no checkpoint during the loop copied the whole WAL back (last: \(checkpoint))")
        let landed = Int(try sqlite3(live, "SELECT count(*) FROM telemetry WHERE event = 'backend-rows-loop'")) ?? -1
        try require(landed == figures.commits, "the backend committed \(figures.commits) rows, the database holds \(landed)")
        try require(figures.commits > 100, "the backend committed only \(figures.commits) times")
        try require(figures.failures == 0, "\(figures.failures) of the backend's writes failed beside the rows loop")
        try require(figures.worst < promptWaitTarget,
                    "the backend waited \(formatDuration(figures.worst)) (of which the lock \(formatDuration(figures.worstLock))) "
                        + "beside the rows loop (target < 200 ms; the snapshot was let go \(formatDuration(snapshotHeld)) after the copy began)")
        return RowsLoopFigures(rows: rows, seconds: seconds, commits: figures.commits, worst: figures.worst,
                               worstLock: figures.worstLock, walLargest: during.largest,
                               snapshotHeld: snapshotHeld)
    }

    /// The copy's temporary files that process `pid` holds open.
    static func copyFiles(of pid: Int32) -> Int {
        let folder = "/proc/\(pid)/fd"
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return descriptors.filter {
            ((try? FileManager.default.destinationOfSymbolicLink(atPath: folder + "/" + $0)) ?? "").contains("etilqs_")
        }.count
    }
}
