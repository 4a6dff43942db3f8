import Foundation

// Shared by OpshTests and ReliabilityTests (a symbolic link there), as
// PseudoTerminal.swift is.

/// The built `opsh` next to this test bundle (`swift build --build-tests`
/// builds it: the test targets depend on it).
/// `OPSH_TEST_EXECUTABLE` names another one: `.ci/run` runs these tests
/// again on the static release build that `./scripts/opsh` runs.
public let opshExecutable: String = {
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

/// A temporary home for one test, removed with it: the XDG folders opsh
/// uses, a folder for scripts, a database path, and the environment that
/// points opsh (and nothing of the machine's own) at them.
open class TestFolder: @unchecked Sendable {
    public let root: String
    public var database: String { root + "/data/test.sqlite" }

    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String

        public init(status: Int32, stdout: String, stderr: String) {
            self.status = status
            self.stdout = stdout
            self.stderr = stderr
        }
    }

    public init(prefix: String) throws {
        root = NSTemporaryDirectory() + prefix + UUID().uuidString
        for folder in ["home", "data", "state", "config", "runtime", "scripts"] {
            try FileManager.default.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true)
        }
        chmod(root + "/runtime", 0o700)
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    open var environment: [String: String] {
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
    public func script(_ name: String, _ text: String) throws -> String {
        let path = root + "/scripts/" + name
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// `arguments` with `--db` to this folder's database, after the
    /// subcommand (`run --db X FILE`), and `--create`: a test's first run
    /// makes its database, as an operator asks for a new one.
    public func withDatabase(_ arguments: [String], database: Bool = true) -> [String] {
        guard database else { return arguments }
        if arguments.first == "run" { return ["run", "--db", self.database, "--create"] + arguments.dropFirst() }
        return ["--db", self.database, "--create"] + arguments
    }
}

/// The names in `folder` an operator sees with `ls`, sorted: not those
/// beginning with a dot, such as the records opsh keeps beside the
/// backups it writes (`.NAME.opsh-record`).
public func visibleFiles(_ folder: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: folder).filter { !$0.hasPrefix(".") }.sorted()
}
