import Foundation
import Git
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real tmpfs mounted on a folder, for the file-system faults (full,
/// read-only). Mounting needs root (CAP_SYS_ADMIN); tests that need it are
/// enabled with `.enabled(if: TmpfsMount.permitted, …)` and skipped with
/// that reason elsewhere.
final class TmpfsMount: @unchecked Sendable {
    let folder: String
    private var mounted = true

    /// Mounts a tmpfs of `size` (`mount`'s syntax: `4m`, `512k`) on `folder`
    /// (created if missing; whatever it held is hidden until unmounted).
    init(on folder: String, size: String) throws {
        self.folder = folder
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let result = try runQuietly("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size),mode=0755", "tmpfs", folder])
        guard result.status == 0 else {
            mounted = false
            throw MountError(message: "mount -t tmpfs on \(folder): \(result.stderr)")
        }
    }

    /// Remounts it read-only (refused by the kernel while a file on it is
    /// open for writing: call it when no opsh runs).
    func remountReadOnly() throws {
        let result = try runQuietly("/bin/mount", ["-o", "remount,ro", folder])
        guard result.status == 0 else { throw MountError(message: "remount,ro \(folder): \(result.stderr)") }
    }

    func remountReadWrite() throws {
        let result = try runQuietly("/bin/mount", ["-o", "remount,rw", folder])
        guard result.status == 0 else { throw MountError(message: "remount,rw \(folder): \(result.stderr)") }
    }

    /// Unmounts (lazily if something still holds it, so a failed test never
    /// leaves a mount behind). Safe to call twice.
    func unmount() {
        guard mounted else { return }
        mounted = false
        if (try? runQuietly("/bin/umount", [folder]))?.status != 0 {
            _ = try? runQuietly("/bin/umount", ["-l", folder])
        }
    }

    deinit { unmount() }

    struct MountError: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    /// Whether this process may mount a tmpfs: tried once for real.
    static let permitted: Bool = {
        guard geteuid() == 0 else { return false }
        let probe = NSTemporaryDirectory() + "opsh-mount-probe-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: probe) }
        guard let mount = try? TmpfsMount(on: probe, size: "64k") else { return false }
        mount.unmount()
        return true
    }()

    static let skipReason: Comment = "mounting a tmpfs needs root (CAP_SYS_ADMIN); mount was refused here"
}

/// Runs a helper program (mount, umount) to its end, outside any Scratch.
private func runQuietly(_ executable: String, _ arguments: [String]) throws -> Scratch.Result {
    collect(try ChildProcess.start(executable, arguments, environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"]))
}
