import Foundation

/// Writes a file so that it appears whole or not at all, and never over a
/// file opsh did not make: the bytes go to a temporary name beside the
/// target (mode 0600, made exclusively), are synced, and are then linked to
/// the final name (which fails if a file is there) or, when `replacing`
/// allows it, renamed over it; the folder is synced last.
public enum AtomicFile {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        /// The file system had no room for it (ENOSPC, EDQUOT).
        public var isDiskFull = false
    }

    /// - parameter replacing: asked about an existing file at `path`; true
    ///   lets the new file replace it. nil: never replace.
    public static func write(_ data: Data, to path: String, replacing: ((String) -> Bool)? = nil) throws {
        let folder = (path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent
        let temporary = (folder as NSString).appendingPathComponent(
            ".\((path as NSString).lastPathComponent).opsh-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).tmp")
        let descriptor = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw failure("create a file in \(folder)") }
        var published = false
        defer { if !published { unlink(temporary) } }
        do {
            defer { close(descriptor) }
            try data.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                    if written < 0 {
                        if errno == EINTR { continue }
                        throw failure("write \(path)")
                    }
                    offset += written
                }
            }
            guard fsync(descriptor) == 0 else { throw failure("sync \(path)") }
        }
        if link(temporary, path) == 0 {
            unlink(temporary)
        } else {
            guard errno == EEXIST else { throw failure("create \(path)") }
            guard let replacing, replacing(path) else {
                throw Failure(description: "\(path) exists; opsh does not overwrite a file it did not make: choose another path")
            }
            guard rename(temporary, path) == 0 else { throw failure("replace \(path)") }
        }
        published = true
        let directory = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
    }

    private static func failure(_ action: String) -> Failure {
        let code = errno
        let full = code == ENOSPC || code == EDQUOT
        let reason = full ? "disk full (database or disk is full)" : String(cString: strerror(code))
        return Failure(description: "cannot \(action): \(reason)", isDiskFull: full)
    }
}
