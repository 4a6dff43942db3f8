import Foundation
import Testing

/// The scripts of `examples/`, run by the built `opsh` in a ``Sandbox``
/// on a database of either engine (``ExampleDatabase``).
/// Children are started with posix_spawn (Foundation's `Process.run()` has
/// crashed now and then under parallel tests on this toolchain).
enum Examples {
    /// `examples/` of this checkout.
    static let folder: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("examples").path

    static func path(_ name: String) -> String { folder + "/" + name }
}

extension Sandbox {
    /// Runs `executable` with posix_spawn, the sandbox's environment and
    /// pipes for stdout and stderr; kills it after `timeout` seconds.
    func spawn(_ executable: String, _ arguments: [String], timeout: Double = 60) throws -> Result {
        var output: [Int32] = [0, 0], errors: [Int32] = [0, 0]
        guard pipe(&output) == 0, pipe(&errors) == 0 else { throw POSIXError(.EMFILE) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errors[1], 2)
        for descriptor in output + errors { posix_spawn_file_actions_addclose(&actions, descriptor) }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        close(output[1])
        close(errors[1])
        guard status == 0 else {
            close(output[0])
            close(errors[0])
            throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO)
        }
        // Read both pipes until they close, so that a full pipe cannot block the child.
        var collected: [Int32: [UInt8]] = [output[0]: [], errors[0]: []]
        var open = [output[0], errors[0]]
        let deadline = Date().addingTimeInterval(timeout)
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !open.isEmpty {
            if Date() > deadline { kill(pid, SIGKILL) }
            var polled = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polled, nfds_t(polled.count), 200)
            if ready < 0 && errno != EINTR { break }
            for entry in polled where entry.revents != 0 {
                let count = read(entry.fd, &buffer, buffer.count)
                if count > 0 {
                    collected[entry.fd]! += buffer[0..<count]
                } else if count == 0 || (count < 0 && errno != EINTR && errno != EAGAIN) {
                    close(entry.fd)
                    open.removeAll { $0 == entry.fd }
                }
            }
        }
        var waited: Int32 = 0
        while waitpid(pid, &waited, 0) < 0 && errno == EINTR {}
        let exitStatus: Int32 = (waited & 0x7f) == 0 ? (waited >> 8) & 0xff : 128 + (waited & 0x7f)
        return Result(status: exitStatus,
                      stdout: String(decoding: collected[output[0]]!, as: UTF8.self),
                      stderr: String(decoding: collected[errors[0]]!, as: UTF8.self))
    }

    /// A git repository in the sandbox with these tags, one commit each.
    func gitRepository(tags: [String]) throws -> String {
        let path = root + "/repo"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        func git(_ arguments: [String]) throws {
            let result = try spawn("/usr/bin/git", ["-C", path, "-c", "user.name=t", "-c", "user.email=t@example.com"] + arguments)
            #expect(result.status == 0, "git \(arguments) failed: \(result.stderr)")
        }
        try git(["init", "-q"])
        for tag in tags {
            try git(["commit", "-q", "--allow-empty", "-m", tag])
            try git(["tag", tag])
        }
        return path
    }
}

/// This process's start time as the job manager records a runner's
/// (`runnerStartedAt`): boot time + /proc/self/stat's start ticks.
func currentProcessStartTime() -> Double {
    let stat = (try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8)) ?? ""
    let fields = stat[stat.range(of: ") ")!.upperBound...].split(separator: " ")
    let ticks = Double(fields[19]) ?? 0
    let procStat = (try? String(contentsOfFile: "/proc/stat", encoding: .utf8)) ?? ""
    let boot = procStat.split(separator: "\n").first { $0.hasPrefix("btime ") }.flatMap { Double($0.dropFirst(6)) } ?? 0
    return boot + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
}

func hostName() -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    gethostname(&buffer, buffer.count - 1)
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// A database of one engine for the examples: rows written from another
/// process (sqlite3, psql) as a backend or a damaged restore leaves them,
/// the examples run on it, and its rows read back to tell whether a run
/// changed anything.
struct ExampleDatabase {
    let sandbox: Sandbox
    let database: TestDatabase
    var engine: Engine { database.engine }

    /// A new database of `engine` with opsh's schema.
    init(_ engine: Engine, in sandbox: Sandbox) throws {
        self.sandbox = sandbox
        database = try sandbox.createdDatabase(engine)
    }

    /// `opsh run --db DB [--dry-run] examples/NAME arguments…`.
    func example(_ name: String, _ arguments: [String] = [], dryRun: Bool = false) throws -> Sandbox.Result {
        try sandbox.spawn(opshExecutable, ["run", "--db", database.db] + (dryRun ? ["--dry-run"] : []) + [Examples.path(name)] + arguments)
    }

    /// SQL from another process; its output, rows one a line.
    @discardableResult
    func sql(_ text: String) throws -> String { try database.sql(text) }

    /// Writes `rows` with the engine's foreign key checks off, as a
    /// database that lived without them holds them (the sqlite3 CLI starts
    /// with them off; on PostgreSQL they are triggers, off for a session
    /// in the replica role).
    func writeWithoutForeignKeys(_ rows: String) throws {
        try sql(engine == .sqlite ? rows : "SET session_replication_role = replica;\n" + rows)
    }

    /// The JSON columns' checks: table, constraint name, expression
    /// (PostgreSQL's; SQLite's are the same names in its schema).
    static let jsonChecks = [("schemes", "platforms_is_json", "opsh_json_valid(platforms)"),
                             ("model_metadata", "capabilities_is_json", "opsh_json_valid(capabilities)"),
                             ("telemetry", "properties_is_json", "properties IS NULL OR opsh_json_valid(properties)")]

    /// Writes `damage` past the JSON columns' checks, as a restore of an old
    /// backend may leave them: SQLite with its CHECK constraints ignored;
    /// PostgreSQL's dropped and put back NOT VALID.
    func writeWithoutJSONChecks(_ damage: String) throws {
        switch engine {
        case .sqlite:
            try sql("PRAGMA ignore_check_constraints = ON;\n" + damage)
        case .postgresql:
            let checks = Self.jsonChecks
            try sql(checks.map { "ALTER TABLE \($0.0) DROP CONSTRAINT \($0.1);" }.joined(separator: "\n") + damage
                    + checks.map { "ALTER TABLE \($0.0) ADD CONSTRAINT \($0.1) CHECK (\($0.2)) NOT VALID;" }.joined(separator: "\n"))
        }
    }

    /// Every row of the database, as text: equal before and after means
    /// nothing changed. Without the audit trail's rows (each run, dry runs
    /// too, adds one: that is the trail, not a change of data); on
    /// PostgreSQL without the sequences' positions, which a rolled-back
    /// insert moves, and the random key of pg_dump's `\restrict` lines.
    func rows() throws -> String {
        switch engine {
        case .sqlite:
            return try sql(".dump").split(separator: "\n", omittingEmptySubsequences: false)
                .filter { !$0.hasPrefix("INSERT INTO opsh_audit ") }.joined(separator: "\n")
        case .postgresql:
            let server = try PostgresServer.shared()
            let dump = try sandbox.spawn(server.tool("pg_dump"), ["--data-only", "--no-owner", "--exclude-table-data=opsh_audit", "--dbname=\(database.db)"])
            #expect(dump.status == 0, "\(dump.stderr)")
            return dump.stdout.split(separator: "\n", omittingEmptySubsequences: false)
                .filter { !$0.contains("setval(") && !$0.hasPrefix("\\restrict") && !$0.hasPrefix("\\unrestrict") }
                .joined(separator: "\n")
        }
    }

    /// Runs `name` and checks that no row changed; returns the result.
    func unchanged(_ name: String, _ arguments: [String] = [], dryRun: Bool = false,
                   sourceLocation: SourceLocation = #_sourceLocation) throws -> Sandbox.Result {
        let before = try rows()
        let result = try example(name, arguments, dryRun: dryRun)
        #expect(try rows() == before, "\(dryRun ? "a dry run" : "a run") of \(name) changed the database", sourceLocation: sourceLocation)
        return result
    }

    /// Runs `name` with --dry-run and checks that no row changed.
    func dryRun(_ name: String, _ arguments: [String] = [], sourceLocation: SourceLocation = #_sourceLocation) throws -> Sandbox.Result {
        try unchanged(name, arguments, dryRun: true, sourceLocation: sourceLocation)
    }

    /// Runs `name` a second time and checks that it changes nothing.
    func secondRun(_ name: String, _ arguments: [String] = [], sourceLocation: SourceLocation = #_sourceLocation) throws -> Sandbox.Result {
        try unchanged(name, arguments, sourceLocation: sourceLocation)
    }
}
