import Foundation
import Testing

/// A temporary home for one test (``TestFolder``), running opsh and
/// sqlite3 through Foundation's `Process`.
final class Sandbox: TestFolder, @unchecked Sendable {
    init() throws {
        try super.init(prefix: "opsh-tests-")
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

    /// Runs opsh with `arguments` (and `--db` to the sandbox's database).
    func opsh(_ arguments: [String], stdin: String? = nil, database: Bool = true) throws -> Result {
        try run(opshExecutable, withDatabase(arguments, database: database), stdin: stdin)
    }

    /// Runs `body` while a sqlite3 process holds the database's write lock
    /// (taken by `begin`, with a row inserted); it commits when `body`
    /// returns.
    func whileAnotherProcessHolds(_ begin: String, _ body: () throws -> Void) throws {
        let (holder, holderOut, holderErr) = try start("/usr/bin/sqlite3", [database], stdin: """
            \(begin)
            INSERT INTO telemetry (event, created_at) VALUES ('x', 0);

            """, keepingStdinOpen: true)
        defer {
            let input = (holder.standardInput as! Pipe).fileHandleForWriting
            input.write(Data("COMMIT;\n".utf8))
            try? input.close()
            _ = finish(holder, holderOut, holderErr)
        }
        usleep(400_000)
        try body()
    }

    /// Starts a child; its standard input gets `stdin` and is closed, unless
    /// `keepingStdinOpen` (the caller writes more through
    /// `process.standardInput`).
    func start(_ executable: String, _ arguments: [String], stdin: String? = nil,
               keepingStdinOpen: Bool = false, environment: [String: String]? = nil) throws -> (Process, Pipe, Pipe) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment ?? self.environment
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

    func run(_ executable: String, _ arguments: [String], stdin: String? = nil,
             environment: [String: String]? = nil) throws -> Result {
        let (process, output, errors) = try start(executable, arguments, stdin: stdin, environment: environment)
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
