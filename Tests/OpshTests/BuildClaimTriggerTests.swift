import Foundation
import Testing

/// A trigger planted in the database (by anyone with write access) that
/// rewrites a scheme's build command whenever a build row changes must
/// not get its command run: `jobs.start` and runners read the command as
/// the operator last set it and refuse a build whose scheme a trigger
/// changed while it was claimed, naming the trigger (issue "Every hole
/// found by attack", item 1).
@Suite struct BuildClaimTriggerTests {
    @Test(arguments: Engine.allCases)
    func aTriggerThatRewritesTheSchemeWhileABuildIsClaimedIsNamedAndItsCommandNeverRuns(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let ran = fixture.root + "/ran", pwned = fixture.root + "/pwned"
        let scheme = try fixture.scheme("Safe", "touch '\(ran)'")

        // Control: without the trigger the build runs the scheme's command.
        let control = try fixture.lua("print(jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 60).status)", [scheme])
        #expect(control.status == 0 && control.stdout == "succeeded\n", "\(control.stdout) \(control.stderr)")
        #expect(FileManager.default.fileExists(atPath: ran))

        try fixture.plantTrigger("zz", "UPDATE schemes SET buildCommand = 'touch \(pwned)' WHERE id = NEW.schemeId")

        // jobs.start{}: the build is refused where it is created and held.
        let started = try fixture.lua("jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 60)", [scheme])
        #expect(started.status == 1, "\(started.stdout) \(started.stderr)")
        #expect(started.stderr.contains("trigger zz"), "\(started.stderr)")
        #expect(started.stderr.contains("was not run"), "\(started.stderr)")

        // jobs.start(id) of a build the backend queued: refused, and failed with a log line.
        let queued = try fixture.enqueue(scheme)
        let startedById = try fixture.lua("jobs.wait(jobs.start(...), 60)", [queued])
        #expect(startedById.status == 1, "\(startedById.stdout) \(startedById.stderr)")
        #expect(startedById.stderr.contains("trigger zz"), "\(startedById.stderr)")
        #expect(try fixture.status(queued) == "failed")
        let queuedLog = try fixture.log(queued)
        #expect(queuedLog.contains("trigger zz"), "\(queuedLog)")

        // A runner: the build it claims is failed, saying which trigger, and the runner says so too.
        let forRunner = try fixture.enqueue(scheme)
        let runner = try fixture.startRunner()
        let ended = try fixture.waitForEnd(forRunner)
        let said = fixture.stop(runner)
        #expect(ended == "failed", "\(said.stderr)")
        let log = try fixture.log(forRunner)
        #expect(log.contains("trigger zz") && log.contains("was not run"), "\(log)")
        #expect(said.stderr.contains("trigger zz"), "\(said.stderr)")

        #expect(!FileManager.default.fileExists(atPath: pwned), "the trigger's command ran")
        // The trigger did fire and did rewrite the scheme: what the builds would have run.
        #expect(try fixture.sql("SELECT buildCommand FROM schemes WHERE id = '\(scheme)'") == "touch \(pwned)")
    }

    /// A trigger on builds that writes elsewhere (the backend's own
    /// bookkeeping) is no reason to refuse a build.
    @Test(arguments: Engine.allCases)
    func aTriggerThatLeavesSchemesAloneDoesNotStopBuilds(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let ran = fixture.root + "/ran"
        let scheme = try fixture.scheme("Safe", "touch '\(ran)'")
        try fixture.sql("CREATE TABLE build_changes (buildId TEXT, status TEXT)")
        try fixture.plantTrigger("bookkeeping", "INSERT INTO build_changes VALUES (NEW.id, NEW.status)")
        let result = try fixture.lua("print(jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 60).status)", [scheme])
        #expect(result.status == 0 && result.stdout == "succeeded\n", "\(result.stdout) \(result.stderr)")
        #expect(FileManager.default.fileExists(atPath: ran))
        #expect(try Int(fixture.sql("SELECT count(*) FROM build_changes")) ?? 0 > 0)
    }
}
