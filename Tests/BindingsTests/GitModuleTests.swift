import Foundation
import Testing
import LuaRuntime
import Store
@testable import Bindings

/// `git.versions` and `git.branches` on real repositories.
@Suite struct GitModuleTests {
    let fixture = try! JobsFixture()

    @Test func versionsAreSortedBySemverWithTheSkippedTagsSecond() throws {
        let results = try fixture.run("""
            local versions, skipped = git.versions(repo)
            local shown = {}
            for i, v in ipairs(versions) do
              shown[i] = v.tag .. '=' .. v.version .. (v.prerelease and ' pre' or '')
            end
            return table.concat(shown, ', '), table.concat(skipped, ','), getmetatable(versions).__name,
                   #versions[1].commit, versions[2].commit
            """)
        let peeled = try jobsTestShell("git -C '\(fixture.repository)' rev-parse 'v1.1.0^{commit}'")
        #expect(results == ["1.0.0=1.0.0, v1.1.0=1.1.0, 2.0.0-beta.1=2.0.0-beta.1 pre", "latest", "opsh.rows", 40,
                            .string(peeled)])
    }

    @Test func aRemoteLocationIsReadWithLsRemote() throws {
        let results = try fixture.run("""
            local versions, skipped = git.versions('file://' .. repo)
            local branches = git.branches('file://' .. repo)
            local names = {}
            for i, b in ipairs(branches) do names[i] = b.name .. (b.current and '*' or '') end
            table.sort(names)
            return #versions, versions[3].tag, skipped[1], table.concat(names, ',')
            """)
        #expect(results == [3, "2.0.0-beta.1", "latest", "feature,main*"])
    }

    @Test func branchesMarkTheCurrentOneAndRemoteTrackingOnes() throws {
        let clone = fixture.test.folder.appendingPathComponent("clone").path
        try jobsTestShell("git clone -q '\(fixture.repository)' '\(clone)'")
        let results = try fixture.run("""
            local function show(branches)
              local t = {}
              for i, b in ipairs(branches) do
                t[i] = b.name .. (b.current and '*' or '') .. (b.remote and ' remote' or '')
              end
              table.sort(t)
              return table.concat(t, ', ')
            end
            local here = git.branches(repo)
            return show(here), show(git.branches(...)), #here[1].commit, getmetatable(here).__name
            """, [.string(clone)])
        #expect(results == ["feature, main*", "main*, origin/feature remote, origin/main remote", 40, "opsh.rows"])
    }

    @Test func rowsRefuseTypos() throws {
        #expect(fixture.test.failure("return git.versions(repo)[1].tga")
            == "test:1: no column 'tga' in this row (columns: tag, version, commit, prerelease)")
    }

    @Test func badLocationsGiveGitsOwnMessage() throws {
        let missing = fixture.test.folder.appendingPathComponent("missing").path
        #expect(fixture.test.failure("git.versions('\(missing)')") == "test:1: no such repository: \(missing) does not exist")
        let plain = fixture.test.folder.path
        let message = fixture.test.failure("git.branches('\(plain)')") ?? ""
        #expect(message.hasPrefix("test:1: \(plain) is not a git repository ("), "\(message)")
        #expect(message.contains("not a git repository"))
        #expect(fixture.test.failure("git.versions()") == "test:1: bad argument #1 to 'versions' (string expected, got no value)")
        #expect(fixture.test.failure("git.branches({})") == "test:1: bad argument #1 to 'branches' (string expected, got table)")
    }
}
