import Foundation

/// `opsh run --lock`: an exclusive `flock` on a file named after the
/// script, so two cron runs of the same script never overlap. The lock
/// goes with the process (also when it is killed).
public final class ScriptLock {
    public enum Failure: Error, CustomStringConvertible {
        /// Another process holds the lock.
        case held(path: String, holder: String?)
        case cannotCreate(path: String, reason: String)

        public var description: String {
            switch self {
            case let .held(path, holder):
                return "another run holds the lock \(path)\(holder.map { " (\($0))" } ?? ""); not running"
            case let .cannotCreate(path, reason):
                return "cannot create the lock file \(path): \(reason)"
            }
        }
    }

    public let path: String
    private let descriptor: Int32

    private init(path: String, descriptor: Int32) {
        self.path = path
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    /// The lock file for a script run against a database: in
    /// `$XDG_RUNTIME_DIR/opsh/locks` (else opsh's state folder), named after
    /// the script's real path and the database's identity (its device and
    /// inode, so two spellings or links of one file share the lock; its
    /// path while it does not exist yet). The same script against two
    /// databases takes two locks.
    ///
    /// - parameter folder: where lock files live (the caller knows opsh's
    ///   folders: `$XDG_RUNTIME_DIR/opsh`, else its state folder).
    public static func path(forScript script: String, database: String, in folder: String) -> String {
        let resolved = realpath(script, nil).map { pointer -> String in
            defer { free(pointer) }
            return String(cString: pointer)
        } ?? script
        let folder = folder + "/locks"
        let name = (resolved as NSString).lastPathComponent.filter { $0.isLetter || $0.isNumber || "._-".contains($0) }
        return "\(folder)/\(name)-\(fnv1a(resolved + "\u{0}" + databaseIdentity(database))).lock"
    }

    static func databaseIdentity(_ path: String) -> String {
        var status = stat()
        if stat(path, &status) == 0 { return "inode \(status.st_dev):\(status.st_ino)" }
        return "path " + (path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path)
    }

    /// Takes the lock without waiting.
    public static func acquire(path: String) throws -> ScriptLock {
        let folder = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw Failure.cannotCreate(path: path, reason: error.localizedDescription)
        }
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw Failure.cannotCreate(path: path, reason: String(cString: strerror(errno)))
        }
        if flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let holder = readHolder(descriptor)
            close(descriptor)
            throw Failure.held(path: path, holder: holder)
        }
        // Say who holds it, for the message of the next one.
        let text = "pid \(getpid()) since \(ISO8601DateFormatter().string(from: Date()))\n"
        _ = ftruncate(descriptor, 0)
        _ = text.withCString { pwrite(descriptor, $0, strlen($0), 0) }
        return ScriptLock(path: path, descriptor: descriptor)
    }

    private static func readHolder(_ descriptor: Int32) -> String? {
        var buffer = [UInt8](repeating: 0, count: 200)
        let count = pread(descriptor, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }

    private static func fnv1a(_ text: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return String(hash, radix: 16)
    }
}
