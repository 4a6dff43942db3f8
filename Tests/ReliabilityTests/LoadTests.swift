import Foundation
import Testing

/// The backend's writers at work while an operator's opsh runs maintenance
/// and a watch, all real processes on one database file:
///
/// - writer A (opsh script): telemetry rows, one autocommit insert each;
/// - writer B (opsh script): build log lines, 5 per transaction, as a runner flushes;
/// - maintenance (opsh script): `telemetry.cleanup` of old rows, a `backup`,
///   a build job (a real /bin/sh child printing 200 lines through `jobs`);
/// - a watch (opsh script) on the newest telemetry row (another process's
///   commits reach it through opsh's polling of the file).
///
/// Each writer counts its commits and "database is locked" errors and times
/// each commit (its wait); the watch times each callback from the oldest
/// change it is the first to see (the writer's timestamp, taken just before
/// its INSERT). Expected: no locked error on
/// any side, every counted commit in the file, the old rows all gone.
@Suite struct LoadTests {
    /// `julianday('now')` in seconds since 1970 (millisecond resolution):
    /// Lua's os.time has whole seconds only.
    static let now = #"local function now() return db.value("SELECT (julianday('now') - 2440587.5) * 86400.0") end"#

    /// A sleep for scripts (`opsh.wait` sleeps while a watch lives).
    static let sleep = #"watch("SELECT 1", function() end) local function sleep(s) opsh.wait(s) end"#

    static let writer = """
        \(now) \(sleep)
        local kind, seconds = arg[1], tonumber(arg[2])
        local start = now()
        local committed, locked, worst = 0, 0, 0
        while now() - start < seconds do
          local t0 = now()
          local ok, e = pcall(function()
            if kind == "telemetry" then
              db.exec("INSERT INTO telemetry (event, properties, created_at) VALUES ('load', ?, ?)", '{"n":' .. (committed + 1) .. '}', t0)
            else
              db.transaction(function()
                for j = 1, 5 do
                  db.exec("INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES (?, 'load-build', 'line', ?)", committed .. "-" .. j, t0)
                end
              end)
            end
          end)
          if ok then
            committed = committed + 1
            worst = math.max(worst, now() - t0)
          elseif tostring(e):find("locked") or tostring(e):find("busy") then
            locked = locked + 1
          else
            error(e)
          end
          sleep(0.002)
        end
        print(string.format("window\t%.3f\t%.3f", start, now()))
        print(committed, locked, string.format("%.4f", worst))
        """

    static let watcher = """
        \(now)
        local latencies = {}
        local seen = 0
        -- From the first change this callback is the first to see: the
        -- oldest row newer than the last one seen.
        watch("SELECT id FROM telemetry WHERE event = 'load' ORDER BY id DESC LIMIT 1", function(rows)
          local t = now()
          if rows[1] then
            local oldest = db.value("SELECT min(created_at) FROM telemetry WHERE event = 'load' AND id > ?", seen)
            if oldest then latencies[#latencies + 1] = t - oldest end
            seen = rows[1].id
          end
        end)
        io.stdout:write("watching\\n") io.stdout:flush()
        opsh.wait(tonumber(arg[1]))
        table.sort(latencies)
        local function at(q) return latencies[math.max(1, math.ceil(#latencies * q))] or -1 end
        print(#latencies, string.format("%.4f", at(0.5)), string.format("%.4f", at(0.99)), string.format("%.4f", at(1)))
        """

    static let maintenance = """
        \(now) \(sleep)
        local backupPath = arg[1]
        -- Once both writers have committed (polled), so that the cleanup
        -- runs while they write.
        while db.value("SELECT count(*) FROM telemetry WHERE event = 'load'") == 0
           or db.value("SELECT count(*) FROM buildLogs WHERE buildId = 'load-build'") == 0 do
          sleep(0.01)
        end
        local cleanupStart = now()
        local report = telemetry.cleanup{ olderThan = "30d", batch = 2000 }
        print(string.format("cleanup\t%.3f\t%.3f", cleanupStart, now()))
        print("deleted", report.deleted, report.batches)
        backup(backupPath)
        print("backup done")
        local s = schemes.insert{ projectBundleIdentifier = "com.example.app", name = "Lines",
                                  buildCommand = "i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo line $i; sleep 0.01; done" }
        local b = jobs.wait(jobs.start{ scheme = s.id, version = "1.0.0" }, 60)
        print("build", b.status, b.id)
        """

    @Test func writersKeepWritingThroughCleanupBackupABuildAndAWatch() throws {
        let seconds = longRun ? 60 : 8
        let oldRows = longRun ? 300_000 : 60_000
        let scratch = try Scratch()
        _ = try scratch.projectWithRepository()
        _ = try scratch.sqlite("""
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('load-scheme', 'com.example.app', 'Load');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES ('load-build', 'load-scheme', '1.0.0', 1, 'running', 0);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(oldRows))
            INSERT INTO telemetry (event, created_at) SELECT 'old', i FROM n;
            """)
        let writerScript = try scratch.script("writer.lua", Self.writer)
        let watcherScript = try scratch.script("watcher.lua", Self.watcher)
        let maintenanceScript = try scratch.script("maintenance.lua", Self.maintenance)
        let backupPath = scratch.root + "/backup.sqlite"

        let watch = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", watcherScript, String(seconds + 2)]))
        // The writers start once the watch is set up (it says so).
        let watching = readFirstLine(watch.standardOutput)
        #expect(String(decoding: watching, as: UTF8.self) == "watching\n")
        let telemetryWriter = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", writerScript, "telemetry", String(seconds)]))
        let logWriter = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", writerScript, "logs", String(seconds)]))
        let maintenance = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", maintenanceScript, backupPath]))

        let maintained = scratch.finish(maintenance)
        let telemetry = scratch.finish(telemetryWriter)
        let logs = scratch.finish(logWriter)
        let watched = scratch.finish(watch, stdoutPrefix: watching)

        for (name, result) in [("maintenance", maintained), ("telemetry writer", telemetry), ("log writer", logs), ("watch", watched)] {
            #expect(result.status == 0, "\(name): exit \(result.status): \(result.stderr)")
            #expect(!result.stderr.lowercased().contains("locked") && !result.stderr.lowercased().contains("busy"), "\(name): \(result.stderr)")
        }
        func fields(_ result: Scratch.Result) -> [String] {
            result.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").last.map { $0.split(separator: "\t").map(String.init) } ?? []
        }
        let a = fields(telemetry), b = fields(logs), w = fields(watched)
        let aCommits = Int(a.first ?? "") ?? -1, bCommits = Int(b.first ?? "") ?? -1
        let lockedErrors = (Int(a.dropFirst().first ?? "") ?? -1) + (Int(b.dropFirst().first ?? "") ?? -1)
        #expect(aCommits > 0 && bCommits > 0, "\(telemetry.stdout) \(logs.stdout)")
        // The maintenance really ran while both writers wrote: the cleanup's
        // time span lies inside each writer's.
        func span(_ result: Scratch.Result, _ label: String) -> (Double, Double)? {
            guard let line = result.stdout.split(separator: "\n").first(where: { $0.hasPrefix(label + "\t") }) else { return nil }
            let parts = line.split(separator: "\t").compactMap { Double($0) }
            return parts.count == 2 ? (parts[0], parts[1]) : nil
        }
        let cleanupSpan = span(maintained, "cleanup")
        for writer in [telemetry, logs] {
            let window = span(writer, "window")
            #expect(cleanupSpan != nil && window != nil
                    && window!.0 <= cleanupSpan!.0 && cleanupSpan!.1 <= window!.1,
                    "the cleanup (\(String(describing: cleanupSpan))) did not run inside the writer's window (\(String(describing: window)))")
        }
        #expect(lockedErrors == 0, "locked errors seen by the writers: \(lockedErrors)")

        // Every counted commit is in the file; the old rows are gone.
        let telemetryRows = Int(try scratch.sqlite("SELECT count(*) FROM telemetry WHERE event = 'load'")) ?? -1
        let logRows = Int(try scratch.sqlite("SELECT count(*) FROM buildLogs WHERE buildId = 'load-build'")) ?? -1
        #expect(telemetryRows == aCommits, "telemetry: \(aCommits) commits counted, \(telemetryRows) rows")
        #expect(logRows == 5 * bCommits, "build logs: \(bCommits) commits of 5 counted, \(logRows) rows")
        #expect(try scratch.sqlite("SELECT count(*) FROM telemetry WHERE event = 'old'") == "0")
        #expect(maintained.stdout.contains("deleted\t\(oldRows)\t"), "\(maintained.stdout)")
        #expect(try scratch.sqlite("PRAGMA integrity_check") == "ok")
        #expect(try scratch.sqlite("PRAGMA foreign_key_check") == "")

        // The backup is a sound database; the build ran its 200 lines.
        #expect(maintained.stdout.contains("backup done"))
        let backupIntegrity = try scratch.integrityCheck(file: backupPath)
        let buildID = maintained.stdout.split(separator: "\n").first { $0.hasPrefix("build\t") }?.split(separator: "\t").last.map(String.init) ?? "?"
        #expect(maintained.stdout.contains("build\tsucceeded"), "\(maintained.stdout)")
        let buildLines = try scratch.sqlite("SELECT count(*) FROM buildLogs WHERE buildId = '\(buildID)' AND content LIKE 'line %'")
        let buildStatus = try scratch.sqlite("SELECT status FROM builds WHERE id = '\(buildID)'")
        #expect(buildLines == "200" && buildStatus == "succeeded", "build \(buildID): \(buildStatus), \(buildLines) lines")

        let callbacks = Int(w.first ?? "") ?? 0
        #expect(callbacks > 0, "the watch never called back: \(watched.stdout) \(watched.stderr)")
        let worstA = Double(a.last ?? "") ?? -1, worstB = Double(b.last ?? "") ?? -1
        let median = Double(w.dropFirst().first ?? "") ?? -1, p99 = Double(w.dropFirst(2).first ?? "") ?? -1
        func ms(_ seconds: Double) -> String { String(format: "%.1f ms", seconds * 1000) }
        reportFigure("load (\(longRun ? "long" : "short"), \(seconds) s): telemetry writer \(aCommits) commits (worst wait \(ms(worstA))), "
                     + "log writer \(bCommits) commits of 5 lines (worst wait \(ms(worstB))), \(lockedErrors) locked errors, "
                     + "\(aCommits - telemetryRows + 5 * bCommits - logRows) writes lost; meanwhile cleanup of \(oldRows) rows, a backup (integrity_check \(backupIntegrity)), "
                     + "a build of \(buildLines) log lines (\(buildStatus)); watch: \(callbacks) callbacks, latency median \(ms(median)), p99 \(ms(p99))")
    }
}
