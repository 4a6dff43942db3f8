import Foundation
import Git
import Testing

#if canImport(Glibc)
import Glibc
#endif


/// The seed of a run: `OPSH_RELIABILITY_SEED`, else a fixed one.
func reliabilitySeed(_ fallback: UInt64) -> UInt64 {
    ProcessInfo.processInfo.environment["OPSH_RELIABILITY_SEED"].flatMap { UInt64($0) } ?? fallback
}

/// Whether the long runs are asked for (`OPSH_RELIABILITY_LONG=1`).
var longRun: Bool { ProcessInfo.processInfo.environment["OPSH_RELIABILITY_LONG"] == "1" }

/// Appends a figure to the file named by `OPSH_RELIABILITY_REPORT`, if set,
/// and prints it. Call it after the assertions behind the figure: the line
/// carries the suite and test it comes from, and `scripts/reliability`
/// writes into RELIABILITY.md only the figures of tests that passed.
func reportFigure(_ line: String, fileID: String = #fileID, function: String = #function) {
    print("figure: \(line)")
    guard let path = ProcessInfo.processInfo.environment["OPSH_RELIABILITY_REPORT"] else { return }
    let suite = (fileID.split(separator: "/").last.map(String.init) ?? fileID).replacingOccurrences(of: ".swift", with: "")
    // The running test (a helper that reports is not the test).
    let test = Test.current?.name ?? function
    // O_APPEND: tests running in parallel append whole lines.
    let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
    guard descriptor >= 0 else { return }
    defer { close(descriptor) }
    let bytes = Array((suite + "\t" + test + "\t" + line.replacingOccurrences(of: "\n", with: " ") + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
}

/// A temporary home for one test (``TestFolder``), running opsh and
/// sqlite3 through posix_spawn.
final class Scratch: TestFolder, @unchecked Sendable {
    init() throws {
        try super.init(prefix: "opsh-reliability-")
    }

    /// Starts `executable` through posix_spawn (stdin /dev/null).
    func spawn(_ executable: String, _ arguments: [String]) throws -> ChildProcess {
        try ChildProcess.start(executable, arguments, environment: environment)
    }

    /// Runs `executable` to its end.
    func run(_ executable: String, _ arguments: [String]) throws -> Result {
        let child = try spawn(executable, arguments)
        return finish(child)
    }

    /// Reads both pipes to their end, then reaps the child.
    func finish(_ child: ChildProcess, stdoutPrefix: [UInt8] = []) -> Result {
        collect(child, stdoutPrefix: stdoutPrefix)
    }

    /// opsh with `--db` to this folder's database (after a subcommand).
    func opsh(_ arguments: [String]) throws -> Result {
        try run(opshExecutable, withDatabase(arguments))
    }

    /// `PRAGMA integrity_check` through the sqlite3 CLI, expected to be
    /// "ok"; returns what it said, so that a figure quotes the measured
    /// answer rather than a literal.
    @discardableResult
    func integrityCheck(file: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let answer = try sqlite("PRAGMA integrity_check", file: file)
        #expect(answer == "ok", "integrity_check: \(answer)", sourceLocation: sourceLocation)
        return answer
    }

    /// SQL through the sqlite3 CLI (another process, another SQLite connection).
    func sqlite(_ sql: String, file: String? = nil) throws -> String {
        let result = try run("/usr/bin/sqlite3", [file ?? database, sql])
        #expect(result.status == 0, "sqlite3 failed: \(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// Reads a child's pipes to their end, then reaps it.
func collect(_ child: ChildProcess, stdoutPrefix: [UInt8] = []) -> Scratch.Result {
    child.finish(stdoutPrefix: stdoutPrefix)
}

/// A file's bytes (for "unchanged" checks).
func fileBytes(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }
