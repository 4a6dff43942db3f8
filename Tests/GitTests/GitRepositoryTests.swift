import Foundation
import Testing
@testable import Git

@Suite struct GitRepositoryTests {
    let git = Git()

    @Test func versionsAreSortedByPrecedenceAndOtherTagsSkipped() throws {
        let directory = TemporaryDirectory()
        let repo = try makeRepository(in: directory)
        let (versions, skipped) = try git.versions(repo)
        #expect(versions.map(\.name) == ["1.0.0", "v1.2.0", "1.9.0", "1.10.0", "2.0.0-beta.1", "2.0.0"])
        #expect(skipped == ["latest", "release-foo", "v1.2"])
        // Annotated tags resolve to their commit, not to the tag object.
        let commit = try sh("git rev-parse 'v1.2.0^{commit}'", in: repo)
        let tagObject = try sh("git rev-parse v1.2.0", in: repo)
        #expect(tagObject != commit)
        #expect(versions[1].commit == commit)
        #expect(versions[1].version == Version("1.2.0"))
        #expect(versions.last?.commit == (try sh("git rev-parse main", in: repo)))
    }

    @Test func branchesMarkTheCurrentOneAndIncludeRemoteTracking() throws {
        let directory = TemporaryDirectory()
        let repo = try makeRepository(in: directory)
        let clone = directory.file("clone")
        try sh("git clone -q '\(repo)' '\(clone)' && cd '\(clone)' && git checkout -q -b topic")

        let branches = try git.branches(clone)
        #expect(branches.map(\.name) == ["main", "topic", "origin/feature", "origin/main"])
        #expect(branches.filter(\.isCurrent).map(\.name) == ["topic"])
        #expect(branches.map(\.isRemote) == [false, false, true, true])
        #expect(branches.first { $0.name == "origin/feature" }?.commit == (try sh("git rev-parse feature", in: repo)))
        #expect(branches.first { $0.name == "origin/feature" }?.ref == "refs/remotes/origin/feature")

        let original = try git.branches(repo)
        #expect(original.map(\.name) == ["feature", "main"])
        #expect(original.filter(\.isCurrent).map(\.name) == ["main"])

        // A detached HEAD is on no branch.
        try sh("git checkout -q --detach 1.0.0", in: clone)
        #expect(try git.branches(clone).allSatisfy { !$0.isCurrent })
    }

    @Test func aFileURLAndABareRepositoryAreReadWithLsRemote() throws {
        let directory = TemporaryDirectory()
        let repo = try makeRepository(in: directory)
        let bare = directory.file("bare.git")
        try sh("git clone -q --bare '\(repo)' '\(bare)'")
        let local = try git.versions(repo)

        for location in ["file://" + repo, bare, "file://" + bare] {
            #expect(try git.kind(of: location) == .remote(location.hasPrefix("file://") ? location : bare))
            let remote = try git.versions(location)
            #expect(remote.versions == local.versions, "\(location)")
            #expect(remote.versions.map(\.commit) == local.versions.map(\.commit))
            #expect(remote.skipped == local.skipped)
            let branches = try git.branches(location)
            #expect(branches.map(\.name) == ["feature", "main"], "\(location)")
            #expect(branches.filter(\.isCurrent).map(\.name) == ["main"])
            #expect(branches.allSatisfy { !$0.isRemote })
        }
        #expect(try git.kind(of: repo) == .workingTree(repo))
        #expect(try git.kind(of: repo + "/.") == .workingTree(repo))
    }

    @Test func missingPathsNonRepositoriesAndFailingGitAreClearErrors() throws {
        let directory = TemporaryDirectory()
        #expect(throws: GitError.missingPath(directory.file("nope"))) { try git.versions(directory.file("nope")) }

        let plain = directory.file("plain")
        try FileManager.default.createDirectory(atPath: plain, withIntermediateDirectories: true)
        let notARepository = failure { _ = try git.branches(plain) }
        guard case let .notARepository(path, command, message) = notARepository else {
            Issue.record("expected notARepository, got \(String(describing: notARepository))")
            return
        }
        #expect(path == plain)
        #expect(command.contains("rev-parse"))
        #expect(message.contains("not a git repository"))

        let url = "file://" + directory.file("missing.git")
        let failed = failure { _ = try git.versions(url) }
        guard case let .commandFailed(command, status, gitMessage) = failed else {
            Issue.record("expected commandFailed, got \(String(describing: failed))")
            return
        }
        #expect(command == ["/usr/bin/git", "ls-remote", "--tags", "--", url])
        #expect(status == 128)
        #expect(gitMessage.contains("does not appear to be a git repository"))
        #expect(failed?.description.hasPrefix("/usr/bin/git ls-remote --tags -- file://") == true)

        let broken = Git(executable: directory.file("no-git"))
        let cannotRun = failure { try broken.run(["--version"]) }
        #expect(cannotRun == .cannotRun(executable: directory.file("no-git"), reason: "No such file or directory"))
    }

    @Test func workspacesAreFreshCheckoutsAtATagABranchOrACommit() throws {
        let directory = TemporaryDirectory()
        let repo = try makeRepository(in: directory)
        let workspace = directory.file("ws/build-1")
        var output: [String] = []

        let atTag = try git.makeWorkspace(of: repo, at: "v1.2.0", path: workspace, onOutput: { output.append($0) })
        #expect(try String(contentsOfFile: workspace + "/version.txt", encoding: .utf8) == "1.2.0\n")
        #expect(atTag.commit == (try sh("git rev-parse 'v1.2.0^{commit}'", in: repo)))
        #expect(output.first == "$ git clone --no-checkout --shared -- \(repo) \(workspace)")
        #expect(output.contains { $0.hasPrefix("Cloning into") })
        #expect(output.contains { $0.hasPrefix("HEAD is now at") })

        // A leftover file does not survive: the workspace is made afresh.
        try "junk".write(toFile: workspace + "/junk.txt", atomically: true, encoding: .utf8)
        try git.makeWorkspace(of: "file://" + repo, at: "feature", path: workspace)
        #expect(try String(contentsOfFile: workspace + "/version.txt", encoding: .utf8) == "feature\n")
        #expect(!FileManager.default.fileExists(atPath: workspace + "/junk.txt"))

        let commit = try sh("git rev-parse 1.9.0", in: repo)
        let atCommit = try git.makeWorkspace(of: repo, at: String(commit.prefix(10)), path: workspace)
        #expect(atCommit.commit == commit)
        #expect(try String(contentsOfFile: workspace + "/version.txt", encoding: .utf8) == "1.9.0\n")

        try git.removeWorkspace(workspace)
        #expect(!FileManager.default.fileExists(atPath: workspace))
        #expect(FileManager.default.fileExists(atPath: repo + "/version.txt"), "the source is untouched")
    }

    @Test func aMissingVersionFailsWithGitsMessageAndLeavesNoWorkspace() throws {
        let directory = TemporaryDirectory()
        let repo = try makeRepository(in: directory)
        let workspace = directory.file("ws")
        let missing = failure { try git.makeWorkspace(of: repo, at: "9.9.9", path: workspace) }
        guard case let .revisionNotFound(location, revision, message) = missing else {
            Issue.record("expected revisionNotFound, got \(String(describing: missing))")
            return
        }
        #expect(location == repo)
        #expect(revision == "9.9.9")
        #expect(message == "fatal: invalid reference: 9.9.9")
        #expect(missing?.description.contains("version '9.9.9' not found in \(repo)") == true)
        #expect(!FileManager.default.fileExists(atPath: workspace))
        #expect(throws: GitError.invalidRevision("--upload-pack=touch x")) {
            try git.makeWorkspace(of: repo, at: "--upload-pack=touch x", path: workspace)
        }
    }
}

/// The GitError `body` throws, or nil.
func failure(_ body: () throws -> Void) -> GitError? {
    do {
        try body()
        return nil
    } catch {
        return error as? GitError
    }
}
