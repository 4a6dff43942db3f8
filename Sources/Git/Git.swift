import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A tag whose name is a semantic version.
public struct VersionTag: Sendable, Hashable {
    /// The tag's name as in the repository (`v1.2.0`).
    public var name: String
    public var version: Version
    /// The commit the tag points to (annotated tags are peeled).
    public var commit: String

    public init(name: String, version: Version, commit: String) {
        self.name = name
        self.version = version
        self.commit = commit
    }
}

/// A branch of a repository.
public struct Branch: Sendable, Hashable {
    /// `main`, or `origin/main` for a remote-tracking branch.
    public var name: String
    /// The full ref (`refs/heads/main`, `refs/remotes/origin/main`).
    public var ref: String
    public var commit: String
    /// A remote-tracking branch (`refs/remotes/…`).
    public var isRemote: Bool
    /// The branch HEAD is on.
    public var isCurrent: Bool

    public init(name: String, ref: String, commit: String, isRemote: Bool, isCurrent: Bool) {
        self.name = name
        self.ref = ref
        self.commit = commit
        self.isRemote = isRemote
        self.isCurrent = isCurrent
    }
}

/// A fresh checkout of a repository at one revision, made for a build.
public struct Workspace: Sendable, Hashable {
    public var path: String
    /// The revision asked for (tag, branch or commit).
    public var revision: String
    /// The commit checked out.
    public var commit: String
}

/// What a git command printed.
public struct GitOutput: Sendable {
    public var standardOutput: String
    public var standardError: String

    /// Standard output split into lines, without the empty last one.
    public var lines: [String] {
        standardOutput.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }
}

/// Git operations over the real `git` (arguments passed as a vector, never
/// through a shell).
///
/// A *location* is a local path (a working tree or a bare repository) or a
/// URL (`file:///srv/app.git`, `https://…`, `host:path`). Working trees
/// are read with `git for-each-ref`; everything else with `git ls-remote`.
public struct Git: Sendable {
    /// The git executable: an absolute path or a name looked up in `PATH`.
    public var executable: String
    /// The environment git runs with (made predictable: no prompts,
    /// messages in English, no `GIT_DIR` inherited from a hook).
    public var environment: [String: String]
    /// How long reading a remote (`git ls-remote`) may take before it is
    /// given up: a remote that never answers would wait for ever. Clones
    /// of an http(s) remote give up after this long below 1 KB/s.
    public var networkTimeout: TimeInterval = 60
    /// Asked while git runs: a reason (`interrupted`) stops it at once,
    /// with every process it started (Ctrl-C, SIGTERM, `--timeout`, a
    /// cancelled build).
    public var stopRequest: (@Sendable () -> String?)?

    public init(executable: String = "/usr/bin/git",
                environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.executable = executable
        var environment = environment
        for variable in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                         "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CEILING_DIRECTORIES", "GIT_PREFIX"] {
            environment[variable] = nil
        }
        environment["GIT_TERMINAL_PROMPT"] = "0"
        environment["LC_ALL"] = "C"
        self.environment = environment
    }

    // MARK: - Reading a repository

    /// The tags that are semantic versions, oldest first by semver
    /// precedence, and the names of the tags that are not versions.
    public func versions(_ location: String) throws(GitError) -> (versions: [VersionTag], skipped: [String]) {
        var tags: [(name: String, commit: String)] = []
        switch try kind(of: location) {
        case .workingTree(let path):
            let output = try run(["-C", path, "for-each-ref", "--format=%(refname:strip=2)%09%(objectname)%09%(*objectname)", "refs/tags"])
            for line in output.lines {
                let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
                guard fields.count == 3 else { continue }
                tags.append((fields[0], fields[2].isEmpty ? fields[1] : fields[2]))
            }
        case .remote(let url):
            let output = try run(["ls-remote", "--tags", "--", url], timeout: networkTimeout)
            var peeled: [String: String] = [:]
            var order: [String] = []
            var direct: [String: String] = [:]
            for line in output.lines {
                let fields = line.split(separator: "\t", maxSplits: 1).map(String.init)
                guard fields.count == 2, fields[1].hasPrefix("refs/tags/") else { continue }
                let name = String(fields[1].dropFirst("refs/tags/".count))
                if name.hasSuffix("^{}") {
                    peeled[String(name.dropLast(3))] = fields[0]
                } else {
                    order.append(name)
                    direct[name] = fields[0]
                }
            }
            tags = order.map { ($0, peeled[$0] ?? direct[$0]!) }
        }
        var versions: [VersionTag] = []
        var skipped: [String] = []
        for tag in tags {
            if let version = Version(tag.name) {
                versions.append(VersionTag(name: tag.name, version: version, commit: tag.commit))
            } else {
                skipped.append(tag.name)
            }
        }
        // Equal precedence (v1.0.0 and 1.0.0): the tag name decides, so the
        // order does not depend on git's.
        versions.sort { $0.version != $1.version ? $0.version < $1.version : $0.name < $1.name }
        return (versions, skipped.sorted())
    }

    /// Local and remote-tracking branches of a working tree (the current
    /// one marked), or the branches of a remote or bare repository (its
    /// HEAD branch marked current).
    public func branches(_ location: String) throws(GitError) -> [Branch] {
        switch try kind(of: location) {
        case .workingTree(let path):
            let output = try run(["-C", path, "for-each-ref",
                                  "--format=%(refname)%09%(objectname)%09%(HEAD)%09%(symref)", "refs/heads", "refs/remotes"])
            return output.lines.compactMap { line in
                let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
                // refs/remotes/origin/HEAD is a pointer, not a branch.
                guard fields.count == 4, fields[3].isEmpty else { return nil }
                let ref = fields[0]
                let isRemote = ref.hasPrefix("refs/remotes/")
                let name = String(ref.dropFirst(isRemote ? "refs/remotes/".count : "refs/heads/".count))
                return Branch(name: name, ref: ref, commit: fields[1], isRemote: isRemote, isCurrent: fields[2] == "*")
            }
        case .remote(let url):
            let output = try run(["ls-remote", "--symref", "--", url, "HEAD", "refs/heads/*"], timeout: networkTimeout)
            var head: String?
            var branches: [Branch] = []
            for line in output.lines {
                let fields = line.split(separator: "\t", maxSplits: 1).map(String.init)
                guard fields.count == 2 else { continue }
                if fields[0].hasPrefix("ref: "), fields[1] == "HEAD" {
                    head = String(fields[0].dropFirst(5))
                } else if fields[1].hasPrefix("refs/heads/") {
                    branches.append(Branch(name: String(fields[1].dropFirst("refs/heads/".count)), ref: fields[1],
                                           commit: fields[0], isRemote: false, isCurrent: false))
                }
            }
            return branches.map { branch in
                var branch = branch
                branch.isCurrent = branch.ref == head
                return branch
            }
        }
    }

    /// How a location is read.
    public enum LocationKind: Sendable, Hashable {
        /// A local working tree (its top folder).
        case workingTree(String)
        /// A URL, or a local bare repository: read with `ls-remote`.
        case remote(String)
    }

    /// Whether `location` is a local working tree or something to reach
    /// with `ls-remote`. A local path must exist and be in a repository.
    public func kind(of location: String) throws(GitError) -> LocationKind {
        guard Self.isLocalPath(location) else { return .remote(location) }
        let path = Self.absolutePath(location)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw .missingPath(path)
        }
        guard isDirectory.boolValue else {
            throw .notARepository(path: path, command: [], message: "it is a file, not a folder")
        }
        let command = ["-C", path, "rev-parse", "--is-inside-work-tree"]
        let insideWorkTree: Bool
        do {
            insideWorkTree = try run(command).lines.first == "true"
        } catch .commandFailed(_, _, let message) {
            throw .notARepository(path: path, command: ["git"] + command, message: message)
        }
        // A bare repository (or a .git folder) is read like a remote.
        guard insideWorkTree else { return .remote(path) }
        let top = try run(["-C", path, "rev-parse", "--show-toplevel"]).lines.first
        return .workingTree(top ?? path)
    }

    /// A URL (`scheme://…`) or scp-like `host:path` is not a local path.
    public static func isLocalPath(_ location: String) -> Bool {
        if location.contains("://") { return false }
        if location.hasPrefix("/") || location.hasPrefix(".") || location.hasPrefix("~") { return true }
        // git's rule: a colon before the first slash makes it host:path.
        if let colon = location.firstIndex(of: ":") {
            let slash = location.firstIndex(of: "/") ?? location.endIndex
            return colon > slash
        }
        return true
    }

    static func absolutePath(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
        return URL(fileURLWithPath: absolute).standardizedFileURL.path
    }

    // MARK: - Workspaces

    /// Makes a fresh checkout of `location` at `revision` (a tag, a branch
    /// or a commit) in `path`, which is replaced if it exists.
    ///
    /// Local repositories are cloned with `--shared` (no object copy).
    /// The revision is looked up as given, then as a branch of the origin;
    /// the checkout is detached. On failure the folder is removed.
    ///
    /// A clone of an http(s) remote gives up after ``networkTimeout`` below
    /// 1 KB/s; any clone stops at ``stopRequest`` (a cancelled build).
    ///
    /// - parameter onOutput: each line git prints (and the commands run), for a build log.
    @discardableResult
    public func makeWorkspace(
        of location: String, at revision: String, path: String,
        onOutput: (String) -> Void = { _ in }
    ) throws(GitError) -> Workspace {
        guard !revision.isEmpty, !revision.hasPrefix("-"), !revision.contains(where: \.isNewline) else {
            throw .invalidRevision(revision)
        }
        let source: String
        var clone = ["clone", "--no-checkout"]
        switch try kind(of: location) {
        case .workingTree(let top):
            source = top
            clone.append("--shared")
        case .remote(let url):
            source = url
            if Self.isLocalPath(url) {
                clone.append("--shared")
            } else {
                clone = ["-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=\(Int(networkTimeout.rounded(.up)))"] + clone
            }
        }
        try removeWorkspace(path)
        let parent = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        } catch {
            throw .workspace(path: path, reason: "cannot create \(parent): \(error.localizedDescription)")
        }
        do throws(GitError) {
            try logged(clone + ["--", source, path], onOutput: onOutput)
            var commit: String?
            for candidate in [revision, "refs/remotes/origin/" + revision] {
                if let sha = try? run(["-C", path, "rev-parse", "--verify", "--quiet", candidate + "^{commit}"]).lines.first {
                    commit = sha
                    break
                }
            }
            guard let commit else {
                // git's own words for the missing revision.
                var message = "unknown revision"
                do {
                    try run(["-C", path, "checkout", "--detach", revision, "--"])
                } catch .commandFailed(_, _, let text) {
                    message = text
                }
                throw GitError.revisionNotFound(location: location, revision: revision, message: message)
            }
            try logged(["-C", path, "-c", "advice.detachedHead=false", "checkout", "--detach", commit],
                       onOutput: onOutput)
            return Workspace(path: path, revision: revision, commit: commit)
        } catch {
            try? removeWorkspace(path)
            throw error
        }
    }

    /// Removes a workspace folder, never following a link (``FolderRemoval``);
    /// nothing happens if it does not exist.
    public func removeWorkspace(_ path: String) throws(GitError) {
        do {
            try FolderRemoval.remove(path)
        } catch {
            throw .workspace(path: path, reason: error.reason)
        }
    }

    @discardableResult
    private func logged(_ arguments: [String], onOutput: (String) -> Void) throws(GitError) -> GitOutput {
        onOutput("$ " + GitError.commandLine(["git"] + arguments))
        return try withoutActuallyEscaping(onOutput) { onOutput throws(GitError) in
            try run(arguments, onLine: onOutput)
        }
    }

    // MARK: - Running git

    /// Runs git with `arguments` and returns what it printed; a non-zero
    /// exit is a ``GitError/commandFailed(command:status:message:)`` with
    /// git's standard error.
    ///
    /// Git runs under a supervisor (``SupervisedProcess``): every process
    /// it starts (a remote helper, ssh) is killed with it, when it is
    /// stopped, and when opsh ends however it ends. Every 0.1 s
    /// ``stopRequest`` is asked; a reason stops git (``GitError/stopped(command:reason:)``).
    ///
    /// - parameters:
    ///   - timeout: how long git may take in all (a remote that never
    ///     answers): ``GitError/timedOut(command:seconds:)`` after it.
    ///   - onLine: called with each line of output as it arrives.
    @discardableResult
    public func run(_ arguments: [String], timeout: TimeInterval? = nil,
                    onLine: ((String) -> Void)? = nil) throws(GitError) -> GitOutput {
        let command = [executable] + arguments
        let process: SupervisedProcess
        do {
            process = try SupervisedProcess.start(executable: executable, arguments: arguments, environment: environment)
        } catch {
            throw .cannotRun(executable: executable, reason: error.reason)
        }
        defer {
            close(process.standardOutput)
            close(process.standardError)
            process.end()
        }
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        var output = [UInt8]()
        var errors = [UInt8]()
        var splitters = [LineSplitter(), LineSplitter()]
        var fds = [pollfd(fd: process.standardOutput, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: process.standardError, events: Int16(POLLIN), revents: 0)]
        var buffer = [UInt8](repeating: 0, count: 65536)
        var open = 2
        while open > 0 {
            if let reason = stopRequest?() {
                throw .stopped(command: command, reason: reason)
            }
            if let deadline, let timeout, Date() >= deadline {
                throw .timedOut(command: command, seconds: timeout)
            }
            let ready = poll(&fds, 2, 100)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            for index in 0..<2 where fds[index].fd >= 0 && fds[index].revents != 0 {
                let count = buffer.withUnsafeMutableBytes { read(fds[index].fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    buffer.withUnsafeBytes { bytes in
                        let chunk = UnsafeRawBufferPointer(rebasing: bytes[0..<count])
                        if index == 0 { output.append(contentsOf: chunk) } else { errors.append(contentsOf: chunk) }
                        if let onLine { splitters[index].feed(chunk, onLine) }
                    }
                } else if count == 0 || (errno != EINTR && errno != EAGAIN) {
                    if let onLine { splitters[index].finish(onLine) }
                    fds[index].fd = -1
                    open -= 1
                }
            }
        }
        var termination: Termination?
        while termination == nil {
            if let reason = stopRequest?() { throw .stopped(command: command, reason: reason) }
            if let deadline, let timeout, Date() >= deadline { throw .timedOut(command: command, seconds: timeout) }
            termination = process.waitForExit(timeout: 0.1)
        }
        let result = GitOutput(standardOutput: String(decoding: output, as: UTF8.self),
                               standardError: String(decoding: errors, as: UTF8.self))
        guard termination == .exited(0) else {
            throw .commandFailed(command: command, status: termination?.exitCode ?? -1,
                                 message: result.standardError.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return result
    }
}
