import Foundation

/// A temporary folder removed when the value goes away.
final class TemporaryDirectory {
    let path: String

    init() {
        let template = NSTemporaryDirectory() + "opsh-git-tests-XXXXXX"
        var bytes = Array(template.utf8CString)
        path = bytes.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
    }

    func file(_ name: String) -> String { path + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

struct ShellError: Error, CustomStringConvertible {
    var script: String
    var output: String
    var description: String { "`\(script)` failed: \(output)" }
}

/// Runs a shell script (test set-up only) and returns its trimmed output.
@discardableResult
func sh(_ script: String, in directory: String? = nil) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", script]
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    var environment = ProcessInfo.processInfo.environment
    environment["GIT_AUTHOR_NAME"] = "Test"
    environment["GIT_AUTHOR_EMAIL"] = "test@example.com"
    environment["GIT_COMMITTER_NAME"] = "Test"
    environment["GIT_COMMITTER_EMAIL"] = "test@example.com"
    environment["GIT_CONFIG_NOSYSTEM"] = "1"
    environment["HOME"] = NSTemporaryDirectory()
    process.environment = environment
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let output = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    guard process.terminationStatus == 0 else { throw ShellError(script: script, output: output) }
    return output
}

/// A repository with history: commits on main tagged as versions (some
/// annotated), tags that are not versions, and a `feature` branch.
///
///     1.0.0  v1.2.0(annotated)  1.9.0  1.10.0  2.0.0-beta.1  2.0.0(annotated)
///     release-foo  v1.2  latest           (not versions)
///     main (current): version.txt = "2.0.0"; feature: version.txt = "feature"
func makeRepository(in directory: TemporaryDirectory, name: String = "repo") throws -> String {
    let path = directory.file(name)
    try sh("""
        set -e
        git init -q -b main '\(path)'
        cd '\(path)'
        commit() { echo "$1" > version.txt; git add version.txt; git commit -q -m "version $1"; }
        commit 1.0.0;        git tag 1.0.0
        commit 1.2.0;        git tag -a v1.2.0 -m "release 1.2.0"; git tag v1.2
        commit 1.9.0;        git tag 1.9.0
        commit 1.10.0;       git tag 1.10.0; git tag release-foo
        commit 2.0.0-beta.1; git tag 2.0.0-beta.1
        commit 2.0.0;        git tag -a 2.0.0 -m "release 2.0.0"; git tag latest
        git checkout -q -b feature
        commit feature
        git checkout -q main
        """)
    return path
}
