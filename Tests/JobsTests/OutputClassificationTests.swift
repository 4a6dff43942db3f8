import Foundation
import Testing
@testable import Jobs
import Store

@Suite struct OutputClassificationTests {
    @Test(arguments: [
        ("main.c:12:5: error: expected ';'", BuildLogLevel.error),
        ("FAILED: tests/unit", .error),
        ("fatal: not a git repository", .error),
        ("Build finished with 0 errors", .info),
        ("src/x.swift:3:1: warning: unused variable", .warning),
        ("WARN deprecated flag", .warning),
        ("[debug] cache hit", .debug),
        ("+ make -j2", .debug),
        ("[3/10] Compiling main.c", .info),
    ])
    func levelComesFromTheLine(line: String, level: BuildLogLevel) {
        #expect(LogClassifier.level(of: line) == level)
    }

    @Test func categorySwitchesToTestWhenTestsStart() {
        var classifier = LogClassifier()
        #expect(classifier.category(of: "[1/2] Compiling") == "build")
        #expect(classifier.category(of: "Running tests...") == "test")
        #expect(classifier.category(of: "ok 1 - adds") == "test")
        var checkout = LogClassifier(category: "checkout")
        #expect(checkout.category(of: "Running tests in checkout?") == "checkout")
    }

    @Test(arguments: [
        ("[12/345] Compiling Foo.swift", 12.0 / 345.0),
        ("ninja: [1/1] Linking", 1.0),
        ("no progress here", nil),
        ("[a/b] [3/4] nested", 0.75),
        ("[5/4] impossible", nil),
        ("[0/0]", nil),
    ] as [(String, Double?)])
    func progressComesFromBracketedCounts(line: String, expected: Double?) {
        #expect(ProgressParser.progress(in: line) == expected)
    }

    @Test func thisProcessIsAliveAndADeadOneIsNot() throws {
        let me = RunnerIdentity.current
        #expect(me.isAlive)
        #expect(me.startedAt > 1_600_000_000)
        // Same pid, another start time: the pid was reused by someone else.
        #expect(!RunnerIdentity(host: me.host, pid: me.pid, startedAt: me.startedAt - 3600).isAlive)

        // A process that has ended: its pid names nobody now.
        let child = try ChildProcess.start("/bin/true", [], environment: [:])
        _ = child.finish()
        let startedAt = me.startedAt
        #expect(!RunnerIdentity(host: me.host, pid: Int(child.pid), startedAt: startedAt).isAlive)
        // Another host cannot be judged from here.
        #expect(RunnerIdentity(host: "elsewhere", pid: 1, startedAt: 0).isAlive)
    }
}
