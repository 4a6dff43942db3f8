import Foundation
import Git
import Store
#if canImport(Glibc)
import Glibc
#endif

/// How the processes of a build are kept together, so that everything it
/// started dies when it ends or is cancelled (ARCHITECTURE.md, "Build
/// runners and the queue"). `setsid` takes a process out of the build's
/// process group and session, so neither can be relied on.
///
/// Every build runs under a supervisor (``SupervisedProcess``), a child
/// subreaper: whatever the build starts stays its descendant, and at the
/// end it kills every descendant it finds in /proc until none is left.
/// Where opsh may make cgroups (its cgroup v2 folder is writable: root, a
/// systemd unit with `Delegate=yes`), the build also gets a cgroup of its
/// own, and the end writes its `cgroup.kill` first, which kills every
/// process in it at once, however fast it forks.
public enum BuildContainment: String, Sendable, Hashable, CaseIterable {
    /// A cgroup of its own where opsh's cgroup v2 folder is writable, and
    /// the supervisor's descendants everywhere.
    case automatic
    /// The supervisor's descendants only.
    case descendants

    /// Whether builds can get a cgroup of their own here.
    public static var cgroupIsAvailable: Bool { BuildCgroup.parentFolder != nil }
}

/// A build's own cgroup (v2): made under opsh's cgroup before the build
/// starts, removed once its processes are gone.
final class BuildCgroup: @unchecked Sendable {
    let path: String
    let procs: Int32
    let kill: Int32

    private init(path: String, procs: Int32, kill: Int32) {
        self.path = path
        self.procs = procs
        self.kill = kill
    }

    deinit {
        close(procs)
        if kill >= 0 { close(kill) }
    }

    private static let counter = Locked(0)

    /// opsh's own cgroup v2 folder when it may make cgroups in it, read once.
    static let parentFolder: String? = {
        guard let mounts = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8),
              let groups = try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8) else { return nil }
        // mountinfo: "… mount-point … - cgroup2 …"; the fifth field is the mount point.
        guard let mountPoint = mounts.split(separator: "\n").lazy.compactMap({ line -> String? in
            let halves = line.components(separatedBy: " - ")
            guard halves.count == 2, halves[1].hasPrefix("cgroup2 ") else { return nil }
            let fields = halves[0].split(separator: " ")
            return fields.count >= 5 ? String(fields[4]) : nil
        }).first else { return nil }
        // /proc/self/cgroup: "0::/path" is the v2 hierarchy.
        guard let own = groups.split(separator: "\n").first(where: { $0.hasPrefix("0::") }) else { return nil }
        let folder = (mountPoint + String(own.dropFirst(3))).replacingOccurrences(of: "//", with: "/")
        // Writable is not enough (a read-only mount says so only at mkdir): try.
        let probe = folder + "/opsh-probe-\(getpid())"
        guard mkdir(probe, 0o755) == 0 else { return nil }
        rmdir(probe)
        return folder
    }()

    /// A new cgroup for a build, or nil where there is none to be had.
    static func make() -> BuildCgroup? {
        guard let parent = parentFolder else { return nil }
        _ = leftoversRemoved
        let number = counter.withLock { value -> Int in
            value += 1
            return value
        }
        let path = parent + "/opsh-build-\(getpid())-\(number)"
        guard mkdir(path, 0o755) == 0 else { return nil }
        let procs = open(path + "/cgroup.procs", O_WRONLY | O_CLOEXEC)
        guard procs >= 0 else {
            rmdir(path)
            return nil
        }
        // cgroup.kill came with Linux 5.14; without it the supervisor's kills do.
        let kill = open(path + "/cgroup.kill", O_WRONLY | O_CLOEXEC)
        return BuildCgroup(path: path, procs: procs, kill: kill)
    }

    /// Once per process: the empty cgroups an opsh that is gone left
    /// (killed before it removed them; its supervisors killed their
    /// processes). Only opsh's own names, and rmdir removes only empty ones.
    private static let leftoversRemoved: Void = {
        guard let parent = parentFolder else { return }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? [] where name.hasPrefix("opsh-build-") {
            let fields = name.dropFirst("opsh-build-".count).split(separator: "-")
            guard fields.count == 2, let pid = pid_t(fields[0]), Int(fields[1]) != nil,
                  pid != getpid(), Glibc.kill(pid, 0) != 0, errno == ESRCH else { continue }
            rmdir(parent + "/" + name)
        }
    }()

    var descriptors: SupervisedProcess.Cgroup { .init(procs: procs, kill: kill) }

    /// Whether `pid` is in this cgroup; nil when it cannot be told (the
    /// process is gone already).
    func contains(_ pid: pid_t) -> Bool? {
        guard let groups = try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8),
              let own = groups.split(separator: "\n").first(where: { $0.hasPrefix("0::") }) else { return nil }
        return path.hasSuffix(String(own.dropFirst(3)))
    }

    /// Removes the cgroup once its processes are gone (the kernel refuses
    /// while one is left: tried for a few seconds).
    func remove() {
        for _ in 0..<100 {
            if rmdir(path) == 0 || errno == ENOENT { return }
            usleep(20_000)
        }
    }
}
