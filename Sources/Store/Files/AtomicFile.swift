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
        let writer = try Writer(path: path)
        try writer.write(data)
        try writer.publish(replacing: replacing)
    }

    /// A file written in pieces (`.output FILE`'s results, chunk after
    /// chunk) that appears at its name whole, when ``publish(replacing:)``
    /// is called; until then its bytes are at ``temporaryPath``. Dropped
    /// unpublished, the temporary file goes.
    public final class Writer {
        public let path: String
        /// Where the bytes are until published: `.NAME.opsh-PID-N.tmp`
        /// beside `path`, made exclusively, mode 0600.
        public let temporaryPath: String
        private let folder: String
        private var descriptor: Int32
        private var done = false

        public init(path: String) throws {
            self.path = path
            let parent = (path as NSString).deletingLastPathComponent
            folder = parent.isEmpty ? "." : parent
            temporaryPath = (folder as NSString).appendingPathComponent(
                ".\((path as NSString).lastPathComponent).opsh-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).tmp")
            descriptor = open(temporaryPath, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw AtomicFile.failure("write \(path)") }
        }

        deinit { abandon() }

        public func write(_ data: Data) throws {
            try data.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                    if written < 0 {
                        if errno == EINTR { continue }
                        throw AtomicFile.failure("write \(path)")
                    }
                    offset += written
                }
            }
        }

        /// Syncs the file and puts it at its name: linked there (which fails
        /// if a file is there) or, when `replacing` allows it, renamed over
        /// it; the folder is synced last. On failure the bytes stay at
        /// ``temporaryPath`` for the caller to keep or ``abandon()``.
        public func publish(replacing: ((String) -> Bool)? = nil) throws {
            guard !done else { return }
            guard fsync(descriptor) == 0 else { throw AtomicFile.failure("sync \(path)") }
            if link(temporaryPath, path) == 0 {
                unlink(temporaryPath)
            } else {
                guard errno == EEXIST else { throw AtomicFile.failure("create \(path)") }
                guard let replacing, replacing(path) else {
                    throw Failure(description: "\(path) exists; opsh does not overwrite a file it did not make: choose another path")
                }
                guard rename(temporaryPath, path) == 0 else { throw AtomicFile.failure("replace \(path)") }
            }
            done = true
            close(descriptor)
            let directory = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if directory >= 0 {
                fsync(directory)
                close(directory)
            }
        }

        /// Removes the unpublished file.
        public func abandon() {
            guard !done else { return }
            done = true
            close(descriptor)
            unlink(temporaryPath)
        }

        /// Stops writing, leaving the unpublished bytes at ``temporaryPath``.
        public func keepUnpublished() {
            guard !done else { return }
            done = true
            close(descriptor)
        }
    }

    fileprivate static func failure(_ action: String) -> Failure {
        let code = errno
        let full = code == ENOSPC || code == EDQUOT
        let reason = full ? "disk full (database or disk is full)" : String(cString: strerror(code))
        return Failure(description: "cannot \(action): \(reason)", isDiskFull: full)
    }
}
