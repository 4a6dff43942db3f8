import Foundation
import Testing

/// `git.versions`/`git.branches` on a remote that never answers can be
/// stopped by SIGTERM, Ctrl-C and `--timeout`, end on their own after a
/// network timeout, and leave no git process behind (issue "Every hole
/// found by attack", item 30).
@Suite struct GitInterruptTests {
    /// opsh running `code` on a silent server's URL (`...`), once git has reached it: the
    /// process and the git processes it started.
    static func started(_ folder: Sandbox, _ server: SilentServer, _ code: String,
                        options: [String] = []) throws -> (ChildProcess, [pid_t]) {
        let url = "git://127.0.0.1:\(server.port)/never"
        let opsh = try folder.start(opshExecutable, folder.withDatabase(options + ["-e", "local url = '\(url)'\n" + code]))
        // Control: git connected and waits (without a stop it would wait for ever).
        let connected = waitUntil(20) { server.connectionCount >= 1 }
        #expect(connected, "git never reached the server")
        let gits = ProcessTable.pids(commandLineContaining: "127.0.0.1:\(server.port)/")
        #expect(!gits.isEmpty)
        return (opsh, gits)
    }

    /// Waits for opsh to end (killing it after 15 s, a failure) and checks no git is left.
    static func ended(_ opsh: ChildProcess, _ gits: [pid_t], within seconds: Double) -> TestFolder.Result {
        let start = Date()
        let stopped = waitUntil(15) { !ProcessTable.isAlive(opsh.pid) }
        if !stopped { kill(opsh.pid, SIGKILL) }
        #expect(stopped && Date().timeIntervalSince(start) < seconds, "opsh did not stop within \(seconds) s")
        let result = opsh.finish()
        #expect(waitUntil(5) { gits.allSatisfy { !ProcessTable.isAlive($0) } }, "git left behind: \(gits)")
        return result
    }

    @Test(arguments: [(SIGTERM, Int32(143)), (SIGINT, Int32(130))])
    func aSignalStopsGitOnARemoteThatNeverAnswers(_ signal: Int32, _ status: Int32) throws {
        let folder = try Sandbox(), server = try SilentServer()
        let (opsh, gits) = try Self.started(folder, server, "git.versions(url)")
        kill(opsh.pid, signal)
        let result = Self.ended(opsh, gits, within: 5)
        #expect(result.status == status, "\(result.stderr)")
    }

    @Test func timeoutStopsGitWith124() throws {
        let folder = try Sandbox(), server = try SilentServer()
        let (opsh, gits) = try Self.started(folder, server, "git.branches(url)", options: ["--timeout", "2"])
        let result = Self.ended(opsh, gits, within: 6)
        #expect(result.status == 124, "\(result.stderr)")
    }

    @Test func aNetworkTimeoutEndsGitSayingSo() throws {
        let folder = try Sandbox(), server = try SilentServer()
        let (opsh, gits) = try Self.started(folder, server, "git.versions(url, { timeout = 1 })")
        let result = Self.ended(opsh, gits, within: 6)
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("did not answer within 1 s"), "\(result.stderr)")
        let refused = try folder.opsh(["-e", "git.versions('/nowhere', { timeout = 0 })"])
        #expect(refused.stderr.contains("option 'timeout' must be a number of seconds > 0, got 0"), "\(refused.stderr)")
    }
}
