import Foundation
import Testing

/// The built `opsh` next to this test bundle (`swift build --build-tests`
/// builds it: the test target depends on it).
/// `OPSH_TEST_EXECUTABLE` names another one: `.ci/run` runs these tests
/// again on the static release build that `./scripts/opsh` runs.
let opshExecutable: String = {
    if let other = ProcessInfo.processInfo.environment["OPSH_TEST_EXECUTABLE"], !other.isEmpty { return other }
    var buffer = [CChar](repeating: 0, count: 4096)
    let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    let executable = count > 0 ? String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    var folder = URL(fileURLWithPath: executable).deletingLastPathComponent()
    // Inside an .xctest bundle folder on some layouts.
    for _ in 0..<4 {
        let candidate = folder.appendingPathComponent("opsh").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        folder = folder.deletingLastPathComponent()
    }
    return "opsh"
}()

/// A temporary home for one test: database, XDG folders, scripts.
final class Sandbox {
    let root: String
    var database: String { root + "/data/test.sqlite" }

    init() throws {
        root = NSTemporaryDirectory() + "opsh-tests-" + UUID().uuidString
        for folder in ["home", "data", "state", "config", "runtime", "scripts"] {
            try FileManager.default.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true)
        }
        chmod(root + "/runtime", 0o700)
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    var environment: [String: String] {
        [
            "HOME": root + "/home",
            "XDG_DATA_HOME": root + "/data",
            "XDG_STATE_HOME": root + "/state",
            "XDG_CONFIG_HOME": root + "/config",
            "XDG_RUNTIME_DIR": root + "/runtime",
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "INPUTRC": "/dev/null",
        ]
    }

    /// Writes a script and returns its path.
    func script(_ name: String, _ text: String) throws -> String {
        let path = root + "/scripts/" + name
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Runs a statement with the sqlite3 CLI (another process).
    @discardableResult
    func sqlite(_ sql: String) throws -> String {
        let result = try run("/usr/bin/sqlite3", [database, sql])
        #expect(result.status == 0, "sqlite3 failed: \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Creates and migrates the database.
    func createDatabase() throws {
        let result = try opsh(["-e", "return 1"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs opsh with `arguments` (and `--db` to the sandbox's database).
    func opsh(_ arguments: [String], stdin: String? = nil, database: Bool = true) throws -> Result {
        try run(opshExecutable, withDatabase(arguments, database: database), stdin: stdin)
    }

    /// `--db` goes after the subcommand (`run --db X FILE`).
    func withDatabase(_ arguments: [String], database: Bool = true) -> [String] {
        guard database else { return arguments }
        if arguments.first == "run" { return ["run", "--db", self.database] + arguments.dropFirst() }
        return ["--db", self.database] + arguments
    }

    /// Starts a child; its standard input gets `stdin` and is closed, unless
    /// `keepingStdinOpen` (the caller writes more through
    /// `process.standardInput`).
    func start(_ executable: String, _ arguments: [String], stdin: String? = nil,
               keepingStdinOpen: Bool = false) throws -> (Process, Pipe, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        let input = Pipe()
        process.standardInput = input
        try process.run()
        // No test may hang the suite: a child still running after 30 s is killed.
        let pid = process.processIdentifier
        DispatchQueue.global().asyncAfter(deadline: .now() + 30) { [process] in
            if process.isRunning { kill(pid, SIGKILL) }
        }
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        if !keepingStdinOpen { try input.fileHandleForWriting.close() }
        return (process, output, errors)
    }

    func run(_ executable: String, _ arguments: [String], stdin: String? = nil) throws -> Result {
        let (process, output, errors) = try start(executable, arguments, stdin: stdin)
        return finish(process, output, errors)
    }

    func finish(_ process: Process, _ output: Pipe, _ errors: Pipe) -> Result {
        // Read both pipes before waiting, so a full pipe cannot block.
        let group = DispatchGroup()
        nonisolated(unsafe) var outData = Data(), errData = Data()
        DispatchQueue.global().async(group: group) { outData = output.fileHandleForReading.readDataToEndOfFile() }
        DispatchQueue.global().async(group: group) { errData = errors.fileHandleForReading.readDataToEndOfFile() }
        group.wait()
        process.waitUntilExit()
        return Result(status: process.terminationStatus,
                      stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData, as: UTF8.self))
    }
}

/// Waits until `condition` holds or `seconds` pass.
func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}
