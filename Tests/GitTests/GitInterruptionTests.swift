import Foundation
import Testing
@testable import Git

/// Git on a remote that never answers can always be stopped: a stop
/// request (Ctrl-C, SIGTERM, `--timeout` in opsh) ends it at once, a
/// network timeout ends it on its own, and no git process is left
/// behind either way (issue "Every hole found by attack", item 30).
@Suite struct GitInterruptionTests {
    static func gitProcesses(_ server: SilentServer) -> [pid_t] {
        ProcessTable.pids(commandLineContaining: "127.0.0.1:\(server.port)/")
    }

    @Test func aRemoteThatNeverAnswersTimesOutAndLeavesNoGitBehind() throws {
        let server = try SilentServer()
        var git = Git()
        git.networkTimeout = 1
        let url = "git://127.0.0.1:\(server.port)/never"
        let started = Date()
        let error = #expect(throws: GitError.self) { try git.versions(url) }
        let took = Date().timeIntervalSince(started)
        #expect(error.map { "\($0)" }?.contains("did not answer within 1 s") == true, "\(String(describing: error))")
        #expect(took < 10, "took \(took) s")
        // Control: git did reach the server, which never answered.
        #expect(server.connectionCount >= 1)
        #expect(waitUntil(5) { Self.gitProcesses(server).isEmpty }, "\(Self.gitProcesses(server))")
    }

    @Test func aStopRequestEndsGitAtOnceAndLeavesNoGitBehind() throws {
        let server = try SilentServer()
        var git = Git()
        let asked = Date()
        git.stopRequest = { Date().timeIntervalSince(asked) > 0.5 ? "interrupted" : nil }
        let url = "git://127.0.0.1:\(server.port)/never"
        let error = #expect(throws: GitError.self) { try git.branches(url) }
        let took = Date().timeIntervalSince(asked)
        #expect(error.map { "\($0)" }?.hasSuffix(": interrupted") == true, "\(String(describing: error))")
        #expect(took < 5, "took \(took) s")
        #expect(server.connectionCount >= 1)
        #expect(waitUntil(5) { Self.gitProcesses(server).isEmpty }, "\(Self.gitProcesses(server))")
    }
}
