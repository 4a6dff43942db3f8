import Foundation
import Testing

/// Nothing a build starts outlives it: daemons it detached with `setsid`
/// are killed when it ends or is cancelled, and one holding its output
/// open does not keep opsh reading (issue "Every hole found by attack",
/// item 31).
@Suite struct BuildDaemonTests {
    static func pid(_ path: String) -> pid_t? {
        waitForFile(path, timeout: 20).flatMap { pid_t($0) }
    }

    @Test(arguments: Engine.allCases)
    func aBuildsDaemonsDieWhenItEndsAndNoneKeepsItsOutputOpen(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let root = fixture.root
        // One daemon keeps the build's output open, one does not; both escape its process group and session.
        let scheme = try fixture.scheme("Daemons", """
            setsid sh -c 'echo $$ > "\(root)/holding.pid"; exec sleep 300' &
            setsid sh -c 'echo $$ > "\(root)/detached.pid"; exec sleep 300' </dev/null >/dev/null 2>&1 &
            while [ ! -s '\(root)/holding.pid' ] || [ ! -s '\(root)/detached.pid' ]; do sleep 0.02; done
            echo leader done
            """)
        let started = Date()
        let result = try fixture.lua("print(jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 60).status)", [scheme])
        let took = Date().timeIntervalSince(started)
        #expect(result.status == 0 && result.stdout == "succeeded\n", "\(result.stdout) \(result.stderr)")
        let holding = try #require(Self.pid(root + "/holding.pid")), detached = try #require(Self.pid(root + "/detached.pid"))
        #expect(waitUntil(5) { !ProcessTable.isAlive(holding) && !ProcessTable.isAlive(detached) },
                "still running: \([holding, detached].filter(ProcessTable.isAlive))")
        // The build ended when its leader did (and the linger of 1 s), not when a reader gave up.
        #expect(took < 8, "took \(took) s")
    }

    @Test(arguments: Engine.allCases)
    func aCancelledBuildsDaemonsDieWithIt(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let root = fixture.root
        let scheme = try fixture.scheme("Endless", """
            setsid sh -c 'echo $$ > "\(root)/daemon.pid"; exec sleep 300' </dev/null >/dev/null 2>&1 &
            echo started; while true; do sleep 0.05; done
            """)
        let result = try fixture.lua("""
            local b = jobs.start{ scheme = ..., version = '1.0.0' }
            local deadline = os.time() + 30
            while #jobs.logs(b.id, { tail = 1000 }) == 0 or jobs.logs(b.id, { tail = 1 })[1].content ~= 'started' do
              assert(os.time() < deadline, 'never started') opsh.wait(0.05)
            end
            local pidFile = io.open(select(2, ...))
            while not pidFile do opsh.wait(0.05) pidFile = io.open(select(2, ...)) end
            local pid = pidFile:read('l') pidFile:close()
            -- Control: the daemon runs while the build does.
            assert(os.execute('kill -0 ' .. pid), 'the daemon is not running')
            jobs.cancel(b.id)
            print(jobs.wait(b.id, 30).status)
            """, [scheme, root + "/daemon.pid"])
        #expect(result.status == 0 && result.stdout == "cancelled\n", "\(result.stdout) \(result.stderr)")
        let daemon = try #require(Self.pid(root + "/daemon.pid"))
        #expect(waitUntil(5) { !ProcessTable.isAlive(daemon) }, "the daemon of a cancelled build still runs")
    }
}
