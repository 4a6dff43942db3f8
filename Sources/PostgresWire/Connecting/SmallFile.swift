import Glibc

/// A small configuration file (`~/.pgpass`, `pg_service.conf`) read whole,
/// with what `fstat` says about the file that was opened (not about a name
/// that may point elsewhere by the time it is read).
struct SmallFile {
    var bytes: [UInt8]
    var mode: mode_t

    var isRegularFile: Bool { mode & S_IFMT == S_IFREG }

    /// The file at `path`, or nil when it cannot be opened (missing,
    /// unreadable): libpq then goes on as if it were not there.
    static func read(_ path: String) -> SmallFile? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        var file = SmallFile(bytes: [], mode: status.st_mode)
        guard file.isRegularFile else { return file }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            file.bytes += buffer[..<count]
        }
        return file
    }

    /// The lines, without their `\n` or `\r\n`.
    var lines: [ArraySlice<UInt8>] {
        bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            line.last == UInt8(ascii: "\r") ? line.dropLast() : line
        }
    }
}
