import Foundation
import Testing
@testable import Jobs

/// Whatever a build starts dies with it, in both ways opsh contains a
/// build: its own cgroup (where opsh's cgroup v2 folder is writable) and
/// the build's supervisor, which kills every descendant it finds in /proc
/// (everywhere else). `setsid` escapes the build's process group and
/// session, so neither may rely on them (issue "Every hole found by
/// attack", item 31).
@Suite struct BuildContainmentTests {
    static var containments: [BuildContainment] {
        BuildContainment.cgroupIsAvailable ? [.automatic, .descendants] : [.descendants]
    }

    @Test(arguments: containments)
    func detachedDaemonsDieWhenTheBuildEndsOrIsCancelled(_ containment: BuildContainment) throws {
        let fixture = try Fixture(cancelGracePeriod: 0.3) { $0.containment = containment }
        let pids = fixture.directory.file("pids")
        try FileManager.default.createDirectory(atPath: pids, withIntermediateDirectories: true)
        let ends = try fixture.scheme("""
            setsid sh -c 'echo $$ > "\(pids)/$OPSH_BUILD_NUMBER-holding"; exec sleep 300' &
            setsid sh -c '(setsid sleep 300 & echo $! > "\(pids)/$OPSH_BUILD_NUMBER-grandchild"); exec sleep 300' </dev/null >/dev/null 2>&1 &
            while [ ! -s "\(pids)/$OPSH_BUILD_NUMBER-holding" ] || [ ! -s "\(pids)/$OPSH_BUILD_NUMBER-grandchild" ]; do sleep 0.02; done
            echo done
            """)
        // Ends on its own.
        let first = try fixture.jobs.run(scheme: ends.id, version: "1.0.0")
        let ended = try fixture.jobs.wait(first.id, timeout: 20)
        #expect(ended.status == .succeeded)
        let firstPids = [try #require(waitForFile(pids + "/1-holding").flatMap { pid_t($0) }),
                         try #require(waitForFile(pids + "/1-grandchild").flatMap { pid_t($0) })]
        #expect(waitUntil(5) { firstPids.allSatisfy { !ProcessTable.isAlive($0) } }, "\(firstPids.filter(ProcessTable.isAlive))")
        let note = try fixture.allLogs(first.id).map(\.record.content).joined(separator: "\n")
        #expect(note.contains(containment == .descendants || !BuildContainment.cgroupIsAvailable
                              ? "contained by its supervisor (every descendant)" : "contained in cgroup "), "\(note)")
    }

    @Test(arguments: containments)
    func aCancelledBuildsDetachedDaemonsDie(_ containment: BuildContainment) throws {
        let fixture = try Fixture(cancelGracePeriod: 0.3) { $0.containment = containment }
        let pidFile = fixture.directory.file("daemon.pid")
        let scheme = try fixture.scheme("""
            setsid sh -c 'echo $$ > "\(pidFile)"; trap "" TERM; exec sleep 300' </dev/null >/dev/null 2>&1 &
            echo started; while true; do sleep 0.05; done
            """)
        let build = try fixture.jobs.run(scheme: scheme.id, version: "1.0.0")
        let daemon = try #require(waitForFile(pidFile).flatMap { pid_t($0) })
        #expect(try eventually(timeout: 10) { try fixture.jobs.logs(build.id, tail: 5).contains { $0.record.content == "started" } })
        #expect(ProcessTable.isAlive(daemon))
        try fixture.jobs.cancel(build.id)
        #expect(try fixture.jobs.wait(build.id, timeout: 10).status == .cancelled)
        #expect(waitUntil(5) { !ProcessTable.isAlive(daemon) }, "the daemon of a cancelled build still runs")
    }
}
