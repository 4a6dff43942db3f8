import Foundation
import Testing

/// A build's workspace is a folder opsh derives from the build's id under
/// the workspaces folder and nowhere else, whatever the id says; opsh
/// removes only workspaces it made, never through a link; and it keeps
/// the last N per scheme (issue "Every hole found by attack", items 26
/// and 32).
@Suite struct WorkspaceTests {
    /// What the folder holds (but hidden names), or nil when it is gone.
    static func listing(_ path: String) -> [String]? {
        try? FileManager.default.contentsOfDirectory(atPath: path).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test(arguments: Engine.allCases)
    func aBuildIdThatIsAPathNeverNamesAFolderOutsideTheWorkspaces(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let victim = fixture.root + "/victim"
        try FileManager.default.createDirectory(atPath: victim, withIntermediateDirectories: true)
        try "mine".write(toFile: victim + "/keep", atomically: true, encoding: .utf8)
        let other = fixture.workspaces + "/not-a-build"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        try "mine".write(toFile: other + "/keep", atomically: true, encoding: .utf8)
        let where_ = fixture.root + "/where.txt"
        let scheme = try fixture.scheme("Where", "pwd -P >> '\(where_)'")

        // Control: a build with an ordinary id checks out under the
        // workspaces folder, and jobs.delete removes its folder.
        let control = try fixture.lua("""
            local b = jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 60)
            print(b.id) jobs.delete(b.id)
            """, [scheme])
        #expect(control.status == 0, "\(control.stderr)")
        let controlId = control.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Self.listing(fixture.workspaces) == ["not-a-build"], "\(Self.listing(fixture.workspaces) ?? [])")
        #expect(try String(contentsOfFile: where_, encoding: .utf8).contains("/ws/\(controlId)"))

        // Ids that are paths, inserted as the backend (or builds.insert) would.
        for id in ["../victim", "a/../../victim", "/tmp", "../../victim", ".."] {
            try fixture.enqueue(scheme, id: id, status: "succeeded")
            let deleted = try fixture.lua("jobs.delete(...) print(jobs.get(...) == nil)", [id])
            #expect(deleted.status != 0 || deleted.stdout.contains("true"), "\(id): \(deleted.stderr)")
            #expect(try fixture.sql("SELECT count(*) FROM builds WHERE id = \(BuildFixture.literal(id))") == "0", "\(id): \(deleted.stderr)")
            #expect(Self.listing(victim) == ["keep"], "\(id) deleted the victim's folder")
            #expect(Self.listing(other) == ["keep"], "\(id) deleted a folder opsh did not make")
            #expect(Self.listing(fixture.workspaces) != nil, "\(id) deleted the workspaces folder")
        }

        // A runner and jobs.start check a build with such an id out inside the workspaces folder.
        let forRunner = try fixture.enqueue(scheme, id: "../victim-runner")
        let runner = try fixture.startRunner()
        let ended = try fixture.waitForEnd(forRunner)
        let said = fixture.stop(runner)
        #expect(ended == "succeeded", "\(said.stderr)")
        let forStart = try fixture.enqueue(scheme, id: "../../victim-start")
        let started = try fixture.lua("print(jobs.wait(jobs.start(...), 60).status)", [forStart])
        #expect(started.stdout == "succeeded\n", "\(started.stderr)")
        let realWorkspaces = URL(fileURLWithPath: fixture.workspaces).resolvingSymlinksInPath().path
        let folders = try String(contentsOfFile: where_, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(folders.count == 3, "\(folders)")
        for folder in folders {
            #expect(folder.hasPrefix(realWorkspaces + "/") && !folder.dropFirst(realWorkspaces.count + 1).contains("/"), "\(folder)")
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.root + "/victim-runner"))
        #expect(!FileManager.default.fileExists(atPath: fixture.root + "/victim-start"))
        #expect(Self.listing(victim) == ["keep"])
    }

    @Test(arguments: Engine.allCases)
    func aWorkspaceThatIsALinkIsNeverFollowed(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let victim = fixture.root + "/victim"
        try FileManager.default.createDirectory(atPath: victim, withIntermediateDirectories: true)
        try "mine".write(toFile: victim + "/keep", atomically: true, encoding: .utf8)
        let scheme = try fixture.scheme("Plain", "true")
        let build = try fixture.enqueue(scheme, status: "succeeded")
        // Someone put a link where the build's workspace would be.
        try FileManager.default.createSymbolicLink(atPath: fixture.workspaces + "/" + build, withDestinationPath: victim)
        let deleted = try fixture.lua("jobs.delete(...)", [build])
        #expect(Self.listing(victim) == ["keep"], "jobs.delete followed the link: \(deleted.stderr)")
        #expect(try fixture.sql("SELECT count(*) FROM builds WHERE id = '\(build)'") == "0", "\(deleted.stderr)")
    }

    @Test(arguments: Engine.allCases)
    func theLastWorkspacesOfEachSchemeAreKeptAndADeletedBuildsIsRemoved(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let first = try fixture.scheme("First", "echo first")
        let second = try fixture.scheme("Second", "echo second")
        try FileManager.default.createDirectory(atPath: fixture.workspaces + "/notes", withIntermediateDirectories: true)
        let ran = try fixture.lua("""
            local first, second = ...
            for i = 1, 4 do print(jobs.wait(jobs.start{ scheme = first, version = '1.0.0' }, 60).id) end
            print(jobs.wait(jobs.start{ scheme = second, version = '1.0.0' }, 60).id)
            """, [first, second], jobs: "keepWorkspaces = 2")
        #expect(ran.status == 0, "\(ran.stderr)")
        let ids = ran.stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 5)
        guard ids.count == 5 else { return }
        // The last two of First, the one of Second, and what opsh did not make.
        #expect(Self.listing(fixture.workspaces) == ([ids[2], ids[3], ids[4]] + ["notes"]).sorted())

        // builds.delete (and the backend's DELETE) leave a folder that the next build's end removes.
        let deleted = try fixture.lua("builds.delete(...)", [ids[3]])
        #expect(deleted.status == 0, "\(deleted.stderr)")
        try fixture.sql("DELETE FROM builds WHERE id = '\(ids[4])'")
        let next = try fixture.lua("print(jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 60).id)", [second],
                                   jobs: "keepWorkspaces = 2")
        #expect(next.status == 0, "\(next.stderr)")
        let nextId = next.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Self.listing(fixture.workspaces) == [ids[2], nextId, "notes"].sorted())

        // keepWorkspaces = 0: a build's workspace goes when it ends (and every scheme keeps none).
        let none = try fixture.lua("print(jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 60).id)", [second],
                                   jobs: "keepWorkspaces = 0")
        #expect(none.status == 0, "\(none.stderr)")
        #expect(Self.listing(fixture.workspaces) == ["notes"])
        let refused = try fixture.lua("return 1", jobs: "keepWorkspaces = -1")
        #expect(refused.status == 1 && refused.stderr.contains("option 'keepWorkspaces' must be an integer >= 0, got -1"), "\(refused.stderr)")
    }

    @Test(arguments: Engine.allCases)
    func aRunnerKeepsTheWorkspacesItWasToldTo(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let scheme = try fixture.scheme("Kept", "echo kept")
        let builds = try (0..<3).map { _ in try fixture.enqueue(scheme) }
        let runner = try fixture.startRunner(["--keep-workspaces", "1", "--concurrency", "1"])
        let ended = try builds.map { try fixture.waitForEnd($0) }
        // The last build's end removes the others' workspaces.
        let kept = waitUntil(10) { Self.listing(fixture.workspaces) == [builds[2]] }
        let said = fixture.stop(runner)
        #expect(ended == ["succeeded", "succeeded", "succeeded"], "\(said.stderr)")
        #expect(kept, "\(Self.listing(fixture.workspaces) ?? [])")

        let refused = try fixture.startRunner(["--keep-workspaces", "some"]).finish()
        #expect(refused.status == 2 && refused.stderr.contains("'some' is not a whole number (0 or more) for '--keep-workspaces'"), "\(refused.stderr)")
    }
}
