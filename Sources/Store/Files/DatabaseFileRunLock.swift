import CSQLiteStore
import Foundation

/// `opsh run`'s lock on an SQLite database (docs/operations.md, `--lock`): an open
/// file description lock on one byte of the database file itself, at an
/// offset made from the script's identity. So the lock belongs to the
/// database's device and inode, whatever the environment (cron has no
/// `XDG_RUNTIME_DIR`), the user, or the name the file is reached by; the
/// same script on another database, or another script, takes another
/// lock.
///
/// The byte is far past the bytes SQLite locks (`PENDING_BYTE` at 1 GiB and
/// the 510 after it), so the lock never meets SQLite's own; and it is an
/// OFD lock, so SQLite closing its descriptors on the same file (which
/// drops the process's POSIX locks) never releases it. It goes when the
/// process ends, also when it is killed. The descriptor is deliberately
/// never closed: closing a descriptor on the database would drop SQLite's
/// POSIX locks in this process.
///
/// A run that may not open the file for writing (`--read-only` by a user
/// without write permission, a read-only file system) cannot take a write
/// lock: it takes a read lock and then looks for any other holder, which
/// it defers to, so two such runs never both go ahead (at worst both stop).
/// While the database does not exist yet (a run that `--create`s it), the
/// lock is on its entry in the nearest existing folder (a byte of the
/// folder, chosen by the script and the rest of the path), and a run that
/// finds the file made looks for such a lock in every folder above it
/// before it locks the file: the run that creates the database and a run
/// that starts after never overlap either.
public final class DatabaseFileRunLock {
    /// Where the run locks' bytes start: 2^62, far past SQLite's.
    public static let firstByte: Int64 = 1 << 62

    public enum Outcome {
        case acquired(DatabaseFileRunLock)
        /// Another run holds it; who, when known ("pid 123 (opsh run
        /// /srv/nightly.lua), since 2026-05-04 02:00:03 UTC").
        case held(holder: String?)
    }

    private let descriptor: Int32
    private let offset: Int64

    private init(descriptor: Int32, offset: Int64) {
        self.descriptor = descriptor
        self.offset = offset
    }

    deinit {
        // Released, but the descriptor stays open (see the type's comment).
        opsh_file_lock_release(descriptor, offset, 1)
    }

    /// Takes the lock of the run identified by `key` (the script's
    /// identity, hashed) on the database at `path`, without waiting. Call
    /// it before this process opens the database with SQLite (`opsh run`
    /// takes it before anything else): an attempt that fails closes its
    /// descriptor on the file.
    public static func acquire(database path: String, key: UInt64) throws -> Outcome {
        let entries = folderEntries(of: path)
        var status = stat()
        guard stat(path, &status) == 0 else {
            // Not made yet: the lock of its entry in the nearest folder that exists.
            guard let (folder, rest) = entries.first else {
                throw StoreError.refused(reason: "cannot lock \(path): no folder of it exists")
            }
            return try take(folder, offset: offset(key, rest), writable: false)
        }
        // A run that began before the file existed holds its entry's lock.
        for (folder, rest) in entries {
            let descriptor = open(folder, O_RDONLY | O_CLOEXEC | O_DIRECTORY)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            let at = offset(key, rest)
            if opsh_file_lock_conflicts(descriptor, at, 1) == 1 { return .held(holder: holder(of: descriptor, offset: at)) }
        }
        return try take(path, offset: offset(key, ""), writable: true)
    }

    /// Where the lock of `key` is in a file: one byte from ``firstByte``
    /// on, the key (and, for a folder's entry, the path below the folder)
    /// choosing which.
    private static func offset(_ key: UInt64, _ below: String) -> Int64 {
        firstByte + Int64(bitPattern: (below.isEmpty ? key : fnv1a(below, seed: key)) & 0xFF_FFFF_FFFF)
    }

    /// Locks the byte at `offset` of `target` (the database file, or a
    /// folder): a write lock when the file opens for writing, else a read
    /// lock after which any other holder wins (checked before and after).
    private static func take(_ target: String, offset: Int64, writable: Bool) throws -> Outcome {
        var descriptor: Int32 = writable ? open(target, O_RDWR | O_CLOEXEC) : -1
        let exclusive = descriptor >= 0
        if !exclusive { descriptor = open(target, O_RDONLY | O_CLOEXEC) }
        guard descriptor >= 0 else {
            throw StoreError.refused(reason: "cannot open \(target) to lock it: \(String(cString: strerror(errno)))")
        }
        func fail(_ what: String) -> StoreError {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            return StoreError.refused(reason: "cannot \(what) the run's lock on \(target): \(reason)")
        }
        func held() -> Outcome {
            let holder = holder(of: descriptor, offset: offset)
            close(descriptor)
            return .held(holder: holder)
        }
        if exclusive {
            switch opsh_file_lock_take(descriptor, 1, offset, 1) {
            case 0: return .acquired(DatabaseFileRunLock(descriptor: descriptor, offset: offset))
            case 1: return held()
            default: throw fail("take")
            }
        }
        switch opsh_file_lock_conflicts(descriptor, offset, 1) {
        case 0: break
        case 1: return held()
        default: throw fail("test")
        }
        switch opsh_file_lock_take(descriptor, 0, offset, 1) {
        case 0: break
        case 1: return held()
        default: throw fail("take")
        }
        if opsh_file_lock_conflicts(descriptor, offset, 1) != 0 {
            opsh_file_lock_release(descriptor, offset, 1)
            return held()
        }
        return .acquired(DatabaseFileRunLock(descriptor: descriptor, offset: offset))
    }

    /// The folders above the database's path that exist, nearest first,
    /// each with the rest of the path below it ("data/test.sqlite").
    private static func folderEntries(of path: String) -> [(folder: String, below: String)] {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var folder = (absolute as NSString).standardizingPath
        var below: [String] = []
        var entries: [(String, String)] = []
        var status = stat()
        while folder != "/" && !folder.isEmpty {
            below.insert((folder as NSString).lastPathComponent, at: 0)
            folder = (folder as NSString).deletingLastPathComponent
            if folder.isEmpty { folder = "/" }
            if stat(folder, &status) == 0 { entries.append((folder, below.joined(separator: "/"))) }
        }
        return entries
    }

    /// The process holding the lock at `offset` on the file `descriptor`
    /// is open on: OFD locks carry no pid (/proc/locks says -1), so the
    /// processes' descriptors on the same file are looked through
    /// (`/proc/PID/fdinfo` lists the locks of each).
    private static func holder(of descriptor: Int32, offset: Int64) -> String? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        let manager = FileManager.default
        let start = String(offset)
        for entry in (try? manager.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), pid != getpid() else { continue }
            for fd in (try? manager.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? [] {
                var other = stat()
                guard stat("/proc/\(pid)/fd/\(fd)", &other) == 0, other.st_dev == status.st_dev, other.st_ino == status.st_ino,
                      let info = try? String(contentsOfFile: "/proc/\(pid)/fdinfo/\(fd)", encoding: .utf8) else { continue }
                // "lock:	1: OFDLCK ADVISORY  WRITE -1 fe:00:16228501 4611686018427387909 4611686018427387909"
                let locks = info.split(separator: "\n").filter { $0.hasPrefix("lock:") }
                if locks.contains(where: { $0.contains("OFDLCK") && $0.split(separator: " ").dropLast().last.map(String.init) == start }) {
                    return ProcessDescription.describe(pid)
                }
            }
        }
        return nil
    }

    /// A 64-bit FNV-1a hash of `text`, continuing from `seed`.
    public static func fnv1a(_ text: String, seed: UInt64 = 0xcbf2_9ce4_8422_2325) -> UInt64 {
        var hash = seed
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return hash
    }
}
