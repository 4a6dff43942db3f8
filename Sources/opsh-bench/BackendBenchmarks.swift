import Foundation
import GRDB

/// Beside a live backend (issue 17): the release `opsh` as an operator runs
/// it, next to a second process that writes as the backend does (short
/// write transactions with a busy timeout, each one timed). Every figure is
/// printed only after the checks behind it passed; a failed check ends the
/// benchmark with an error, and no figure is printed for it.
///
/// - the `-wal` left by `examples/demo-data.lua` (1,000,000 telemetry rows)
///   and the largest it grew to while the script ran (ARCHITECTURE.md,
///   decision 8: opsh never pins the WAL);
/// - the backend's worst wait while an interactive `--dry-run` shell, on a
///   real pseudo-terminal, sits at its prompt after having written;
/// - the same while a `db.rows` loop with slow work per row runs
///   (BackendRowsLoopBenchmarks.swift);
/// - a 250,000-log import on both engines, and on SQLite the shortest
///   transaction that publishes those rows (BackendImportBenchmarks.swift).
enum BackendBenchmarks {
    static let demoRows = 1_000_000
    /// The issue's bound on the WAL, in bytes (MB = 10⁶ bytes).
    static let walLimit: Int64 = 64_000_000
    static let importLogs = 250_000
    /// The backend writer's busy timeout: SQLite's usual and opsh's default.
    static let busyTimeout = 5.0
    /// The target for the backend's worst wait beside a dry-run shell.
    static let promptWaitTarget = 0.2
    /// How long the backend writes while the dry-run shell sits at its prompt.
    static let promptSeconds = 3.0

    struct CheckFailed: Error, CustomStringConvertible {
        var description: String
    }

    /// A check that must hold before the figure it backs is printed.
    static func require(_ condition: Bool, _ message: @autoclosure () -> String) throws {
        guard condition else { throw CheckFailed(description: "opsh-bench (backend): " + message()) }
    }

    static func run(directory: String, executable: String, repository: String) throws -> String {
        let opsh = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("opsh").path
        try require(FileManager.default.isExecutableFile(atPath: opsh),
                    "opsh not found next to \(executable): build it with `./scripts/build-release opsh`")
        let home = directory + "/backend"
        for folder in ["home", "data", "state", "config", "runtime"] {
            try FileManager.default.createDirectory(atPath: home + "/" + folder, withIntermediateDirectories: true)
        }
        chmod(home + "/runtime", 0o700)
        let environment = [
            "HOME": home + "/home", "XDG_DATA_HOME": home + "/data", "XDG_STATE_HOME": home + "/state",
            "XDG_CONFIG_HOME": home + "/config", "XDG_RUNTIME_DIR": home + "/runtime",
            "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb", "INPUTRC": "/dev/null",
        ]
        // The live database: the demo data, then the dry-run session and the
        // import run on it, as they would on a backend's database.
        let live = home + "/live.sqlite"
        let demo = try demoData(opsh: opsh, live: live, repository: repository, environment: environment, directory: home)
        let dryRun = try dryRunShell(opsh: opsh, live: live, environment: environment, executable: executable, directory: home)
        let rowsLoop = try slowRowsLoop(opsh: opsh, live: live, environment: environment, executable: executable, directory: home)
        let imported = try importsBesideBackend(opsh: opsh, live: live, environment: environment, executable: executable,
                                                repository: repository, directory: home)

        return """
            ### Beside a live backend

            The release `opsh` next to a second process that writes as a backend does (this executable, through GRDB): \
            one telemetry row per `BEGIN IMMEDIATE … COMMIT` every 5 ms with a \(formatSeconds(busyTimeout)) busy timeout, \
            each transaction timed by that process. Its worst wait is its longest transaction; "of which the lock" is \
            its longest `BEGIN IMMEDIATE` alone (the rest is the insert and the commit's fsync). MB of 10⁶ bytes.

            | figure | measured | target | |
            | --- | --- | --- | --- |
            | `-wal` right after `opsh run examples/demo-data.lua` exits (\(formatCount(demo.rows)) telemetry rows inserted) | \(formatBytes(demo.walAfter)) | ≤ 64 MB | met |
            | largest `-wal` while demo-data.lua ran (sampled every 2 ms) | \(formatBytes(demo.walLargest)) | ≤ 64 MB | met |
            | backend's worst wait while an interactive `--dry-run` shell sits at its prompt after writing (\(dryRun.commits) commits, \(dryRun.failures) failed) | \(formatDuration(dryRun.worst)) (of which the lock \(formatDuration(dryRun.worstLock))) | < 200 ms | met |
            | backend's worst wait while a `db.rows` loop with slow work per row reads \(formatCount(rowsLoop.rows)) rows (\(rowsLoop.commits) commits) | \(formatDuration(rowsLoop.worst)) (of which the lock \(formatDuration(rowsLoop.worstLock))) | < 200 ms | met |
            - **WAL after demo-data.lua**: `opsh run --db FILE --create examples/demo-data.lua` on a new database \
            (\(formatCount(demo.rows)) telemetry rows through `telemetry.insertMany` in batches of 10,000, \
            \(formatDuration(demo.seconds)) in all). The size of `FILE-wal` was read as soon as opsh exited, before any \
            other process opened the database, and every 2 ms by a thread of opsh-bench while the script ran \
            (\(formatCount(demo.samples)) samples): \(formatBytes(demo.walAfter)) after, \(formatBytes(demo.walLargest)) \
            at most (the database file: \(formatBytes(demo.databaseSize))). A checkpoint does not shrink the `-wal`: \
            SQLite writes it again from its start, so its size is the most it held at once.
            - **A dry-run shell at its prompt**: `opsh --db FILE --dry-run` on a real pseudo-terminal, on that database; \
            the session ran `\(dryRun.chunk)` and was back at its prompt; then the backend wrote for \
            \(formatSeconds(promptSeconds)): \(dryRun.commits) commits, \(dryRun.failures) failed, the longest \
            \(formatDuration(dryRun.worst)). Checked before this was printed: opsh-bench read `/proc/locks` every \
            millisecond meanwhile (\(formatCount(dryRun.lockSamples)) times) and never saw the shell hold the write lock; \
            the session's next chunk still saw its own row; leaving, it said what it rolled back; the database holds \
            none of its changes and every row the backend committed.
            - **A slow `db.rows` loop**: `opsh run` of a script that reads the \(formatCount(rowsLoop.rows)) demo rows \
            through `db.rows` and spends \(formatDuration(slowWork)) of work on each of its first \(formatCount(slowRows)) \
            (\(formatDuration(rowsLoop.seconds)) in all), while the backend wrote. Checked before this was printed: the loop \
            copied its rows aside while it still ran (its temporary file seen in `/proc/PID/fd`), a passive \
            checkpoint by another process, tried again and again from then on, copied the whole WAL back while the loop \
            still ran (\(formatDuration(rowsLoop.snapshotHeld)) after the copy's file appeared: the copy reads the rest of the \
            result on the snapshot), the loop read exactly its snapshot's rows, and every backend commit is in the \
            database. The `-wal` was at most \(formatBytes(rowsLoop.walLargest)).
            #### A large import beside the backend (issue 27)

            A project with one build and \(formatCount(imported.logs)) log lines, made and exported by opsh \
            (`export.project`, a \(formatBytes(imported.documentBytes)) document) from another database, published while \
            the backend wrote as above (on PostgreSQL: the same loop in C over libpq, `bench/backend/pg-backend.c`) and \
            a reader process counted `buildLogs` every 5 ms (a count of 250,000 rows is itself work for the machine). Checked before a row is printed: every log row \
            arrived, every backend commit is in the database, and the reader saw only the count before and the count \
            after (all or nothing). SQLite's write lock is byte 120 of the `-shm` file; opsh-bench read `/proc/locks` \
            every millisecond and timed the publishing process's longest hold of it.

            | engine | publisher | longest write-lock hold | backend's worst wait | backend's commits | reader saw | target | |
            | --- | --- | --- | --- | --- | --- | --- | --- |
            \(importRows(imported))

            On SQLite one writer runs at a time, so a transaction that makes every row appear at once is a wait \
            for the backend as long as that transaction: the `sqlite3` row, the same rows inserted by SQLite's own \
            C code from an attached file, is the shortest such transaction on this machine. Under 200 ms and all or \
            nothing for every reader cannot both hold on SQLite at this size; PostgreSQL's row locks let the backend \
            write while one transaction imports.
            """
    }

    // MARK: demo-data.lua

    struct DemoFigures {
        var rows: Int
        var seconds: Double
        var walAfter: Int64
        var walLargest: Int64
        var samples: Int
        var databaseSize: Int64
    }

    static func demoData(opsh: String, live: String, repository: String, environment: [String: String],
                         directory: String) throws -> DemoFigures {
        let sampler = FileSizeSampler(path: live + "-wal", interval: 0.002)
        let started = now()
        let result = try runProcess(opsh, ["run", "--db", live, "--create", repository + "/examples/demo-data.lua"],
                                    environment: environment, directory: directory)
        let seconds = now() - started
        let during = sampler.stop()
        // Before any other connection opens the file: the last one to close
        // would checkpoint and delete the -wal.
        let walAfter = fileSize(live + "-wal") ?? 0
        try require(result.status == 0, "demo-data.lua failed (exit \(result.status)): \(result.stderr)")
        let rows = Int(try sqlite3(live, "SELECT count(*) FROM telemetry WHERE session_id LIKE 'demo-%'")) ?? -1
        try require(rows == demoRows, "demo-data.lua left \(rows) demo telemetry rows, not \(demoRows)")
        try require(during.samples > 100, "the WAL was sampled only \(during.samples) times")
        try require(during.largest >= walAfter, "the largest WAL sampled (\(during.largest)) is below the one left (\(walAfter))")
        try require(walAfter <= walLimit, "demo-data.lua left a \(formatBytes(walAfter)) WAL (limit \(formatBytes(walLimit)))")
        try require(during.largest <= walLimit, "the WAL grew to \(formatBytes(during.largest)) during demo-data.lua (limit \(formatBytes(walLimit)))")
        return DemoFigures(rows: rows, seconds: seconds, walAfter: walAfter, walLargest: during.largest,
                           samples: during.samples, databaseSize: fileSize(live) ?? 0)
    }

    // MARK: A dry-run shell at its prompt

    struct PromptFigures {
        var chunk: String
        var commits: Int
        var failures: Int
        var worst: Double
        var worstLock: Double
        /// How often /proc/locks was read (the shell was never seen holding the write lock).
        var lockSamples: Int
    }

    static func dryRunShell(opsh: String, live: String, environment: [String: String], executable: String,
                            directory: String) throws -> PromptFigures {
        let terminal = try Terminal(executable: opsh, arguments: ["--db", live, "--dry-run"], environment: environment)
        defer { terminal.close() }
        try terminal.expect("the dry run works on a private copy", timeout: 60)
        try terminal.expect("opsh> ", timeout: 60)
        // A write of a few rows and one of many, as an operator trying a repair.
        let chunk = "projects.insert{ bundleIdentifier = 'dry', name = 'Dry', gitRepositoryURL = '/dry' } "
            + "db.exec(\"DELETE FROM telemetry WHERE id % 10 = 0\")"
        terminal.send(chunk + "\r")
        try terminal.expect("opsh> ", timeout: 120)

        let writer = try BackendWriter(executable: executable, path: live, event: "backend-dry-run", directory: directory)
        // The shell itself, seen from outside: does it take the write lock?
        let shellLocks = WriteLockSampler(databasePath: live, pid: terminal.pid)
        Thread.sleep(forTimeInterval: promptSeconds)
        let shellHeld = shellLocks.stop()
        let figures = try writer.stop()

        // The session still sees what it wrote: it did write, and the
        // backend wrote beside it.
        terminal.send("print('dry rows ' .. projects.count{ where = { bundleIdentifier = 'dry' } })\r")
        try terminal.expect("dry rows 1", timeout: 30)
        try terminal.expect("opsh> ", timeout: 30)
        terminal.send("\u{4}")
        try terminal.expect("projects: 1 inserted", timeout: 60)
        let status = terminal.waitForExit(timeout: 60)
        try require(status == 0, "the dry-run shell ended with \(status.map(String.init) ?? "no exit")")
        try require(try sqlite3(live, "SELECT count(*) FROM projects WHERE bundleIdentifier = 'dry'") == "0",
                    "the dry run's row reached the database")
        let landed = Int(try sqlite3(live, "SELECT count(*) FROM telemetry WHERE event = 'backend-dry-run'")) ?? -1
        try require(landed == figures.commits, "the backend committed \(figures.commits) rows, the database holds \(landed)")
        try require(figures.commits > 100, "the backend committed only \(figures.commits) times")
        try require(shellHeld.samples > 100 && shellHeld.holds == 0,
                    "the dry-run shell took the write lock \(shellHeld.holds) times at its prompt (\(shellHeld.samples) samples)")
        try require(figures.failures == 0, "\(figures.failures) of the backend's writes failed beside the dry-run shell")
        try require(figures.worst < promptWaitTarget,
                    "the backend waited \(formatDuration(figures.worst)) beside the dry-run shell (target < 200 ms)")
        return PromptFigures(chunk: chunk, commits: figures.commits, failures: figures.failures, worst: figures.worst,
                             worstLock: figures.worstLock, lockSamples: shellHeld.samples)
    }

    // MARK: The backend writer (a second process: this executable)

    /// The writer process: one telemetry row per `BEGIN IMMEDIATE`
    /// transaction every 5 ms until `stopFile` exists, with a busy timeout
    /// of `busyTimeout` seconds; a write that fails is counted, not fatal.
    /// Prints "ready" after its first write, then, at the end, its commits,
    /// its failures, its longest transaction and its longest wait for the
    /// write lock (`BEGIN IMMEDIATE` alone), in seconds.
    static func runWriter(path: String, stopFile: String, busyTimeout: Double, event: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(busyTimeout)
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        var worst = 0.0
        var worstLock = 0.0
        var commits = 0
        var failures = 0
        var first = true
        while first || !FileManager.default.fileExists(atPath: stopFile) {
            let start = now()
            do {
                try queue.writeWithoutTransaction { db in
                    try db.execute(sql: "BEGIN IMMEDIATE")
                    worstLock = max(worstLock, now() - start)
                    do {
                        try db.execute(sql: "INSERT INTO telemetry (event, properties, created_at) VALUES (?, ?, ?)",
                                       arguments: [event, "{\"i\":\(commits)}", wallClock()])
                        try db.execute(sql: "COMMIT")
                    } catch {
                        try? db.execute(sql: "ROLLBACK")
                        throw error
                    }
                }
                commits += 1
            } catch {
                worstLock = max(worstLock, now() - start)
                failures += 1
            }
            worst = max(worst, now() - start)
            if first {
                FileHandle.standardOutput.write(Data("ready\n".utf8))
                first = false
            }
            Thread.sleep(forTimeInterval: 0.005)
        }
        print("\(commits) \(failures) \(worst) \(worstLock)")
    }

    /// A running backend writer.
    final class BackendWriter {
        let process = Process()
        let output = Pipe()
        let stopFile: String

        struct Figures {
            var commits: Int
            var failures: Int
            var worst: Double
            /// The longest `BEGIN IMMEDIATE`: waiting for the write lock alone.
            var worstLock: Double
        }

        /// Starts the writer and returns once it has written once.
        convenience init(executable: String, path: String, event: String, directory: String) throws {
            try self.init(command: { [executable, "--backend-writer", path, $0, String(BackendBenchmarks.busyTimeout), event] },
                          directory: directory)
        }

        /// Starts `command(stopFile)` (a writer or a reader that prints
        /// "ready" once it has begun, and its figures once `stopFile`
        /// exists) and returns once it is ready.
        init(command: (String) -> [String], directory: String) throws {
            stopFile = directory + "/stop-\(UUID().uuidString)"
            let arguments = command(stopFile)
            process.executableURL = URL(fileURLWithPath: arguments[0])
            process.arguments = Array(arguments.dropFirst())
            process.standardOutput = output
            try process.run()
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let data = output.fileHandleForReading.availableData
                if data.isEmpty { break }
                line += data
            }
            try require(String(decoding: line, as: UTF8.self).hasPrefix("ready"),
                        "\(arguments[0]) did not start: \(String(decoding: line, as: UTF8.self))")
        }

        /// Ends it at once if it still runs (a check failed before it was stopped).
        func endIfRunning() {
            if process.isRunning { process.terminate() }
        }

        /// Stops it; the words of its last line.
        func stopFields() throws -> [String] {
            _ = FileManager.default.createFile(atPath: stopFile, contents: nil)
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            let text = String(decoding: data, as: UTF8.self)
            let last = text.split(separator: "\n").last.map(String.init) ?? ""
            try require(process.terminationStatus == 0,
                        "\(process.executableURL?.lastPathComponent ?? "the backend") ended with \(process.terminationStatus), saying \(text)")
            return last.split(whereSeparator: \.isWhitespace).map(String.init)
        }

        func stop() throws -> Figures {
            let fields = try stopFields()
            try require(fields.count == 4, "the backend writer said \(fields.joined(separator: " "))")
            return Figures(commits: Int(fields[0]) ?? -1, failures: Int(fields[1]) ?? -1, worst: Double(fields[2]) ?? .infinity,
                           worstLock: Double(fields[3]) ?? .infinity)
        }
    }

    // MARK: Sampling from outside

    /// The largest size a file reached, read every `interval` seconds on a
    /// thread of its own (a missing file counts as 0 bytes).
    final class FileSizeSampler: @unchecked Sendable {
        private let lock = NSLock()
        private var largest: Int64 = 0
        private var samples = 0
        private var stopping = false
        private let done = DispatchSemaphore(value: 0)

        init(path: String, interval: Double) {
            Thread.detachNewThread { [self] in
                while true {
                    let size = fileSize(path) ?? 0
                    lock.lock()
                    largest = max(largest, size)
                    samples += 1
                    let stop = stopping
                    lock.unlock()
                    if stop { break }
                    usleep(useconds_t(interval * 1e6))
                }
                done.signal()
            }
        }

        /// Stops after one more sample.
        func stop() -> (largest: Int64, samples: Int) {
            lock.lock()
            stopping = true
            lock.unlock()
            done.wait()
            return (largest, samples)
        }
    }

    /// How long a process holds SQLite's WAL write lock (a POSIX write
    /// lock on byte 120 of the `-shm` file, as `LockHolders` reads it),
    /// from `/proc/locks` read every millisecond: the holds seen, the
    /// longest and their total.
    final class WriteLockSampler: @unchecked Sendable {
        private let lock = NSLock()
        private var stopping = false
        private var result = (holds: 0, longest: 0.0, total: 0.0, samples: 0)
        private let done = DispatchSemaphore(value: 0)

        init(databasePath: String, pid: Int32) {
            var status = stat()
            let inode: UInt64? = stat(databasePath + "-shm", &status) == 0 ? UInt64(status.st_ino) : nil
            Thread.detachNewThread { [self] in
                var heldSince: Double?
                var holds = 0, longest = 0.0, total = 0.0, samples = 0
                while true {
                    let time = now()
                    let holding = inode.map { Self.holdsWriteLock(pid: pid, shmInode: $0) } ?? false
                    samples += 1
                    if holding, heldSince == nil { heldSince = time }
                    if !holding, let since = heldSince {
                        holds += 1
                        longest = max(longest, time - since)
                        total += time - since
                        heldSince = nil
                    }
                    lock.lock()
                    let stop = stopping
                    lock.unlock()
                    if stop { break }
                    usleep(1000)
                }
                lock.lock()
                result = (holds, longest, total, samples)
                lock.unlock()
                done.signal()
            }
        }

        func stop() -> (holds: Int, longest: Double, total: Double, samples: Int) {
            lock.lock()
            stopping = true
            lock.unlock()
            done.wait()
            lock.lock()
            defer { lock.unlock() }
            return result
        }

        /// "1: POSIX  ADVISORY  WRITE 30546 fe:00:16237444 120 120"
        static func holdsWriteLock(pid: Int32, shmInode: UInt64) -> Bool {
            let descriptor = open("/proc/locks", O_RDONLY)
            guard descriptor >= 0 else { return false }
            defer { close(descriptor) }
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                if count <= 0 { break }
                bytes += buffer[..<count]
            }
            for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count >= 8, fields[1] == "POSIX", fields[3] == "WRITE", Int32(fields[4]) == pid,
                      fields[5].split(separator: ":").last.flatMap({ UInt64($0) }) == shmInode,
                      fields[6] == "120" else { continue }
                return true
            }
            return false
        }
    }

    // MARK: Processes

    struct Ran {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// A child with its stdout and stderr going to files (no pipe to fill).
    struct Started {
        let process: Process
        let stdoutPath: String
        let stderrPath: String

        func finish() -> Ran {
            process.waitUntilExit()
            let out = (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? ""
            let err = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
            try? FileManager.default.removeItem(atPath: stdoutPath)
            try? FileManager.default.removeItem(atPath: stderrPath)
            return Ran(status: process.terminationStatus, stdout: out, stderr: err)
        }
    }

    static func startProcess(_ executable: String, _ arguments: [String], environment: [String: String],
                             directory: String) throws -> Started {
        let name = UUID().uuidString
        let stdoutPath = directory + "/\(name).out", stderrPath = directory + "/\(name).err"
        _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle(forWritingAtPath: stdoutPath)
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        try process.run()
        return Started(process: process, stdoutPath: stdoutPath, stderrPath: stderrPath)
    }

    static func runProcess(_ executable: String, _ arguments: [String], environment: [String: String],
                           directory: String) throws -> Ran {
        try startProcess(executable, arguments, environment: environment, directory: directory).finish()
    }

    /// SQL through the sqlite3 CLI (another process); its trimmed output.
    static func sqlite3(_ path: String, _ sql: String) throws -> String {
        let result = try runProcess("/usr/bin/sqlite3", ["-bail", path, sql],
                                    environment: ["PATH": "/usr/bin:/bin"], directory: NSTemporaryDirectory())
        try require(result.status == 0, "sqlite3 \(sql): \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: Formatting

    static func formatBytes(_ bytes: Int64) -> String {
        if bytes < 1_000_000 { return String(format: "%.0f KB", Double(bytes) / 1e3) }
        return String(format: "%.1f MB", Double(bytes) / 1e6)
    }

    static func formatSeconds(_ seconds: Double) -> String { String(format: "%g s", seconds) }

    static func formatCount(_ value: Int) -> String { CleanupBenchmarks.formatCount(value) }
}

/// A file's size in bytes, nil when it does not exist.
func fileSize(_ path: String) -> Int64? {
    var status = stat()
    return stat(path, &status) == 0 ? Int64(status.st_size) : nil
}

/// `opsh` on a real pseudo-terminal (as Tests/TestSupport/PseudoTerminal.swift
/// does for the tests): the child is a session leader whose controlling
/// terminal is the pty, so it runs its interactive shell.
final class Terminal {
    let master: Int32
    let pid: pid_t
    private var transcript = ""
    private var consumed: String.Index
    private var closed = false

    init(executable: String, arguments: [String], environment: [String: String]) throws {
        var master: Int32 = 0, slave: Int32 = 0
        var size = winsize(ws_row: 40, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0)
        guard openpty(&master, &slave, nil, nil, &size) == 0 else { throw POSIXError(.EIO) }
        var nameBuffer = [CChar](repeating: 0, count: Int(PATH_MAX))
        guard ttyname_r(slave, &nameBuffer, nameBuffer.count) == 0 else { throw POSIXError(.EIO) }
        let slaveName = String(decoding: nameBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        self.master = master
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addclose(&actions, master)
        posix_spawn_file_actions_addclose(&actions, slave)
        // Opened after setsid: the pty becomes the controlling terminal.
        posix_spawn_file_actions_addopen(&actions, 0, slaveName, O_RDWR, 0)
        posix_spawn_file_actions_adddup2(&actions, 0, 1)
        posix_spawn_file_actions_adddup2(&actions, 0, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(0x80 /* POSIX_SPAWN_SETSID */ | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let status = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        Glibc.close(slave)
        guard status == 0 else { throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO) }
        pid = child
        consumed = transcript.startIndex
    }

    /// Kills the child if it still runs.
    func close() {
        guard !closed else { return }
        closed = true
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == 0 {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
        }
        Glibc.close(master)
    }

    func send(_ text: String) {
        _ = text.withCString { write(master, $0, strlen($0)) }
    }

    /// Waits until `text` appears after what earlier expectations matched.
    func expect(_ text: String, timeout: Double) throws {
        let deadline = now() + timeout
        while true {
            if let range = transcript.range(of: text, range: consumed..<transcript.endIndex) {
                consumed = range.upperBound
                return
            }
            let remaining = deadline - now()
            if remaining <= 0 { break }
            readAvailable(timeout: remaining)
        }
        throw BackendBenchmarks.CheckFailed(
            description: "opsh-bench (backend): expected \(text.debugDescription) in the terminal; it shows:\n\(transcript[consumed...])")
    }

    private func readAvailable(timeout: Double) {
        var descriptor = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, Int32(max(1, min(timeout, 0.2) * 1000))) > 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(master, &buffer, buffer.count)
        guard count > 0 else { return }
        let offset = transcript.distance(from: transcript.startIndex, to: consumed)
        transcript += Self.plain(String(decoding: buffer[..<count], as: UTF8.self))
        consumed = transcript.index(transcript.startIndex, offsetBy: offset)
    }

    /// Waits for the child to exit; its status (nil: still running).
    func waitForExit(timeout: Double) -> Int32? {
        let deadline = now() + timeout
        var status: Int32 = 0
        while now() < deadline {
            readAvailable(timeout: 0.05)
            if waitpid(pid, &status, WNOHANG) == pid {
                closed = true
                Glibc.close(master)
                return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
            }
        }
        return nil
    }

    /// Text without terminal escape sequences and carriage returns.
    static func plain(_ text: String) -> String {
        var result = ""
        var iterator = text.unicodeScalars.makeIterator()
        while let scalar = iterator.next() {
            if scalar == "\u{1B}" {
                guard let next = iterator.next() else { break }
                if next == "[" {
                    while let c = iterator.next(), !(c.properties.isAlphabetic || c == "~") {}
                } else if next == "]" {
                    while let c = iterator.next(), c != "\u{07}" {}
                }
                continue
            }
            if scalar == "\r" || scalar == "\u{07}" || scalar == "\u{08}" { continue }
            result.unicodeScalars.append(scalar)
        }
        return result
    }
}
