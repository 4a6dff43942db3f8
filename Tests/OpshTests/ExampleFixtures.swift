import Foundation
import Testing

/// The scripts of `examples/`, run by the built `opsh` in a ``Sandbox``.
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

    /// `opsh run --db <sandbox db> [--dry-run] examples/<name> arguments…`
    func example(_ name: String, _ arguments: [String] = [], dryRun: Bool = false) throws -> Result {
        try spawn(opshExecutable, ["run", "--db", database, "--create"] + (dryRun ? ["--dry-run"] : []) + [Examples.path(name)] + arguments)
    }

    /// `opsh --db <sandbox db> -e code`, which must succeed.
    func lua(_ code: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let result = try spawn(opshExecutable, ["--db", database, "--create", "-e", code])
        #expect(result.status == 0, "opsh -e failed: \(result.stderr)", sourceLocation: sourceLocation)
    }

    /// SQL through the sqlite3 CLI (foreign keys off, as the CLI starts),
    /// its output trimmed.
    @discardableResult
    func sql(_ text: String, file: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let result = try spawn("/usr/bin/sqlite3", [file ?? database, text])
        #expect(result.status == 0, "sqlite3 failed: \(result.stderr)", sourceLocation: sourceLocation)
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Every row of every table, as text: equal before and after means
    /// nothing changed.
    /// The database as SQL, without the audit trail's rows (each run,
    /// dry runs too, adds one: that is the trail, not a change of data).
    func dump() throws -> String {
        try sql(".dump").split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("INSERT INTO opsh_audit ") }.joined(separator: "\n")
    }

    /// Runs `name` with --dry-run and checks that no row changed; returns the result.
    func dryRun(_ name: String, _ arguments: [String] = [], sourceLocation: SourceLocation = #_sourceLocation) throws -> Result {
        let before = try dump()
        let result = try example(name, arguments, dryRun: true)
        #expect(try dump() == before, "--dry-run of \(name) changed the database", sourceLocation: sourceLocation)
        return result
    }

    /// Runs `name` a second time and checks that it changes nothing.
    func secondRun(_ name: String, _ arguments: [String] = [], sourceLocation: SourceLocation = #_sourceLocation) throws -> Result {
        let before = try dump()
        let result = try example(name, arguments)
        #expect(try dump() == before, "a second run of \(name) changed the database", sourceLocation: sourceLocation)
        return result
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
