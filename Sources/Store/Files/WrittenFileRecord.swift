import Foundation

/// What opsh records beside a file it wrote and may later replace or
/// delete (a backup): `.NAME.opsh-record` in the file's folder, naming the
/// file's device and inode, its size and its modification time as opsh
/// left it (ARCHITECTURE.md, decision 9: files opsh writes replace only
/// what opsh made).
///
/// A file is the one opsh wrote while the record beside it still names it
/// exactly. A copy of it (another inode), a file written over it in place
/// (another size or time), a file that merely matches a name pattern, or
/// one of the same kind made by someone else (an opsh database, an archive
/// the operator made with pg_dump) has no such record: what the file holds
/// or what it is called never makes it opsh's.
public struct WrittenFileRecord: Equatable, Sendable {
    public var device: UInt64
    public var inode: UInt64
    public var size: Int64
    public var modifiedSeconds: Int64
    public var modifiedNanoseconds: Int64

    /// The record's first line: what the file is, and the format's version.
    static let header = "opsh wrote this file: record 1"
    /// Records are small; anything larger at a record's name is not one.
    static let largest = 4096

    /// The file at `path` as it is now (not following a symbolic link), or
    /// nil when it is not a regular file.
    public static func current(_ path: String) -> WrittenFileRecord? {
        var status = stat()
        guard lstat(path, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else { return nil }
        return WrittenFileRecord(device: UInt64(status.st_dev), inode: UInt64(status.st_ino), size: Int64(status.st_size),
                                 modifiedSeconds: Int64(status.st_mtim.tv_sec), modifiedNanoseconds: Int64(status.st_mtim.tv_nsec))
    }

    /// Where the record of the file at `path` is: `.NAME.opsh-record` beside it.
    public static func recordPath(for path: String) -> String {
        let folder = (path as NSString).deletingLastPathComponent
        let name = "." + (path as NSString).lastPathComponent + ".opsh-record"
        return folder.isEmpty ? name : (folder as NSString).appendingPathComponent(name)
    }

    /// Records that `written` (a file opsh has just written and synced, not
    /// changed from now on) is the file opsh put at `path`: the record
    /// appears whole (``AtomicFile``) and replaces only an earlier record.
    /// Called before `written` is given the name `path` (a link or rename
    /// keeps its inode, size and time), so no file opsh published is ever
    /// without its record.
    public static func write(for path: String, describing written: String) throws {
        guard let record = current(written) else {
            throw StoreError.refused(reason: "cannot record \(written): it is not a regular file")
        }
        let recordPath = recordPath(for: path)
        do {
            try AtomicFile.write(Data(record.text.utf8), to: recordPath, replacing: { Self.parse(recordAt: $0) != nil })
        } catch let failure as AtomicFile.Failure where failure.isDiskFull {
            throw StoreError.diskFull(path: (recordPath as NSString).deletingLastPathComponent)
        } catch {
            throw StoreError.refused(reason: "cannot record the file opsh wrote at \(path): \(error)")
        }
    }

    /// The record beside `path`, or nil when there is none (or what is at
    /// its name is not a record).
    public static func recorded(for path: String) -> WrittenFileRecord? {
        parse(recordAt: recordPath(for: path))
    }

    /// Whether the file at `path` is the one its record names.
    public static func matches(_ path: String) -> Bool {
        guard let recorded = recorded(for: path), let now = current(path) else { return false }
        return recorded == now
    }

    /// Removes the record of `path`, if what is at its name is a record.
    public static func remove(for path: String) {
        let record = recordPath(for: path)
        if parse(recordAt: record) != nil { unlink(record) }
    }

    /// Removes the record of `path` only if it still names `file` (a file
    /// that did not get the name after all).
    static func remove(for path: String, ifNaming file: WrittenFileRecord) {
        if recorded(for: path) == file { unlink(recordPath(for: path)) }
    }

    var text: String {
        """
        \(Self.header)
        device \(device)
        inode \(inode)
        size \(size)
        modified \(modifiedSeconds).\(String(modifiedNanoseconds).leftPadded(to: 9))

        """
    }

    /// The record in the file at `path`: a small regular file (not a link)
    /// in this format.
    private static func parse(recordAt path: String) -> WrittenFileRecord? {
        guard let status = current(path), status.size <= largest,
              let data = FileManager.default.contents(atPath: path) else { return nil }
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n")
        guard lines.first == Substring(header) else { return nil }
        var fields: [Substring: Substring] = [:]
        for line in lines.dropFirst() {
            guard let space = line.firstIndex(of: " ") else { return nil }
            fields[line[..<space]] = line[line.index(after: space)...]
        }
        guard let device = fields["device"].flatMap({ UInt64($0) }), let inode = fields["inode"].flatMap({ UInt64($0) }),
              let size = fields["size"].flatMap({ Int64($0) }), let modified = fields["modified"] else { return nil }
        let parts = modified.split(separator: ".")
        guard parts.count == 2, let seconds = Int64(parts[0]), let nanoseconds = Int64(parts[1]) else { return nil }
        return WrittenFileRecord(device: device, inode: inode, size: size, modifiedSeconds: seconds, modifiedNanoseconds: nanoseconds)
    }
}

private extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
