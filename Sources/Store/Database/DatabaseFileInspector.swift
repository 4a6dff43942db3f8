import Foundation

/// Looks at a database file's bytes before SQLite opens it.
///
/// Opening a file with SQLite in read-write mode can change it (WAL mode,
/// migrations), so opsh first makes sure the file is an SQLite database and
/// is not truncated, using nothing but reads.
enum DatabaseFileInspector {
    enum Verdict: Equatable {
        /// No file: it will be created.
        case missing
        /// A zero-length file: SQLite treats it as an empty database.
        case empty
        /// An SQLite database whose size matches its header.
        case database
    }

    static let headerMagic = Array("SQLite format 3\0".utf8)

    static func inspect(path: String) throws -> Verdict {
        var status = stat()
        guard stat(path, &status) == 0 else {
            if errno == ENOENT { return .missing }
            throw StoreError.cannotOpen(path: path, detail: String(cString: strerror(errno)))
        }
        if (status.st_mode & S_IFMT) == S_IFDIR {
            throw StoreError.cannotOpen(path: path, detail: "it is a directory")
        }
        let fileSize = Int64(status.st_size)
        if fileSize == 0 { return .empty }

        let header = try readHeader(path)
        guard header.count >= 16, Array(header[0..<16]) == headerMagic else {
            throw StoreError.notADatabase(path: path)
        }
        guard header.count == 100 else {
            throw StoreError.corrupt(path: path, detail: "the file is shorter than an SQLite header (\(fileSize) bytes)")
        }

        // Page size: big-endian u16 at offset 16, where 1 means 65536.
        let rawPageSize = Int64(header[16]) << 8 | Int64(header[17])
        let pageSize = rawPageSize == 1 ? 65536 : rawPageSize
        guard pageSize >= 512, pageSize & (pageSize - 1) == 0 else {
            throw StoreError.corrupt(path: path, detail: "invalid page size \(rawPageSize) in the header")
        }
        // The in-header page count (offset 28) is valid when the change
        // counter (24) equals the version-valid-for number (92).
        let changeCounter = bigEndian32(header, 24)
        let validFor = bigEndian32(header, 92)
        let pageCount = bigEndian32(header, 28)
        if changeCounter == validFor, pageCount > 0 {
            let expected = Int64(pageCount) * pageSize
            // A WAL database may hold newer pages in its -wal file, so only
            // a main file shorter than its header says is a truncation.
            // Unless the -wal file holds frames: a checkpoint that was cut
            // short (a full disk, a kill) writes page 1, with the new page
            // count, before the file has grown to it; SQLite still reads
            // those pages from the WAL, and the database is whole.
            if fileSize < expected && !walHoldsFrames(path) {
                throw StoreError.corrupt(
                    path: path,
                    detail: "the file is truncated: \(fileSize) bytes where the header promises \(pageCount) pages of \(pageSize) bytes (\(expected) bytes)")
            }
        }
        return .database
    }

    /// Up to the first 100 bytes of the file (plain system calls: this runs
    /// on every start, before anything else needs Foundation's files).
    private static func readHeader(_ path: String) throws -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw StoreError.cannotOpen(path: path, detail: String(cString: strerror(errno)))
        }
        defer { close(descriptor) }
        var header = [UInt8](repeating: 0, count: 100)
        var count = 0
        while count < header.count {
            let read = header.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress! + count, $0.count - count, off_t(count)) }
            if read < 0 && errno == EINTR { continue }
            guard read > 0 else { break }
            count += read
        }
        return Array(header.prefix(count))
    }

    /// Whether `path`-wal exists and is longer than a WAL header (32 bytes):
    /// committed pages SQLite reads from it may not be in `path` yet.
    static func walHoldsFrames(_ path: String) -> Bool {
        var status = stat()
        return stat(path + "-wal", &status) == 0 && status.st_size > 32
    }

    private static func bigEndian32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16
            | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }
}
