import Foundation

/// A shell script that failed during a test's set-up.
public struct ShellError: Error, CustomStringConvertible {
    public var script: String
    public var output: String
    public var description: String { "`\(script)` failed: \(output)" }
}

/// Runs a shell script (test set-up only: git repositories and the like)
/// with a fixed git identity, and returns its trimmed output (stdout and
/// stderr); throws when it fails.
@discardableResult
public func sh(_ script: String, in directory: String? = nil) throws -> String {
    var environment = ProcessInfo.processInfo.environment
    environment["GIT_AUTHOR_NAME"] = "Test"
    environment["GIT_AUTHOR_EMAIL"] = "test@example.com"
    environment["GIT_COMMITTER_NAME"] = "Test"
    environment["GIT_COMMITTER_EMAIL"] = "test@example.com"
    environment["GIT_CONFIG_NOSYSTEM"] = "1"
    environment["HOME"] = NSTemporaryDirectory()
    let command = directory.map { "cd '\($0.replacingOccurrences(of: "'", with: "'\\''"))' && { \(script)\n}" } ?? script
    let result = try ChildProcess.start("/bin/sh", ["-c", command + " 2>&1"], environment: environment).finish()
    let output = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    guard result.status == 0 else { throw ShellError(script: script, output: output) }
    return output
}

/// SQL through the sqlite3 command-line shell: another process, another
/// SQLite connection. Its trimmed output; throws when it fails.
@discardableResult
public func sqlite3CLI(_ path: String, _ sql: String) throws -> String {
    // Waiting up to 5 s for a lock, as any reader beside a writer would: even
    // in WAL mode a reader can meet SQLITE_BUSY for a moment while another
    // connection sets the WAL up or recovers it (the CLI does not wait at all).
    let result = try ChildProcess.start("/usr/bin/sqlite3", ["-bail", "-cmd", ".timeout 5000", path, sql],
                                        environment: ProcessInfo.processInfo.environment).finish()
    guard result.status == 0 else { throw ShellError(script: "sqlite3 \(path) \(sql)", output: result.stderr) }
    return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}
