import Foundation
import Store
#if canImport(Glibc)
import Glibc
#endif

/// Log lines a build printed while its database did not answer, kept in a
/// file beside the workspaces once more of them wait than memory should
/// hold (README, "Build runners": a runner outlives a restarted server).
/// The log sink writes them back, oldest first, before anything newer,
/// and removes the file once they all landed.
///
/// The file is opsh's own: its name is a random one (never built from a
/// build id), it is made with `O_EXCL` and mode 0600, and only the spool
/// that made it removes it. A runner killed while lines wait here leaves
/// the file behind (`opsh-log-spool-*` in the workspaces folder).
///
/// Records are length-prefixed (a 4-byte length, then the fields
/// separated by NUL, which no field holds: PostgreSQL's text cannot, and
/// the sink cleans it from content on PostgreSQL; on SQLite a NUL in
/// content is kept by escaping it as U+FFFD here).
final class LogSpool {
    let path: String
    private let descriptor: Int32
    private var readOffset: off_t = 0
    private var writeOffset: off_t = 0
    /// Lines written to the file and not yet handed back.
    private(set) var count = 0

    /// A new spool file in `folder`; nil when it cannot be made (the sink
    /// then holds the lines in memory and the build waits on its pipe).
    init?(in folder: String) {
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let path = folder + "/opsh-log-spool-" + UUID().uuidString.lowercased()
        let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return nil }
        self.path = path
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }

    /// Appends `lines`; false when the file could not take them (disk
    /// full), in which case none of them count as spooled.
    func append(_ lines: ArraySlice<NewBuildLogLine>) -> Bool {
        var bytes: [UInt8] = []
        for line in lines {
            let fields = [line.id, line.level.rawValue, line.category,
                          line.content.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}"), String(line.createdAt.bitPattern)]
            let record = Array(fields.joined(separator: "\u{0}").utf8)
            withUnsafeBytes(of: UInt32(record.count).littleEndian) { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: record)
        }
        let written = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, writeOffset) }
        guard written == bytes.count else { return false }
        writeOffset += off_t(written)
        count += lines.count
        return true
    }

    /// The next `limit` lines at most, oldest first, without consuming
    /// them (``consume(_:)`` once they landed).
    func peek(_ limit: Int) -> (lines: [NewBuildLogLine], bytes: off_t) {
        var lines: [NewBuildLogLine] = []
        var offset = readOffset
        while lines.count < limit, offset < writeOffset {
            var length: UInt32 = 0
            guard withUnsafeMutableBytes(of: &length, { pread(descriptor, $0.baseAddress, 4, offset) }) == 4 else { break }
            let size = Int(UInt32(littleEndian: length))
            var record = [UInt8](repeating: 0, count: size)
            guard record.withUnsafeMutableBytes({ pread(descriptor, $0.baseAddress, size, offset + 4) }) == size else { break }
            offset += 4 + off_t(size)
            let fields = record.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            guard fields.count == 5, let level = BuildLogLevel(rawValue: fields[1]), let bits = UInt64(fields[4]) else { continue }
            lines.append(NewBuildLogLine(id: fields[0], level: level, category: fields[2], content: fields[3],
                                         createdAt: Double(bitPattern: bits)))
        }
        return (lines, offset - readOffset)
    }

    /// Marks what ``peek(_:)`` returned as written.
    func consume(lines: Int, bytes: off_t) {
        readOffset += bytes
        count -= lines
    }

    /// Removes the file (the spool's own).
    func remove() {
        unlink(path)
    }
}
