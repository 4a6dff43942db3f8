import CSQLiteStore
import Foundation

/// What a backup file is on each engine: an SQLite database (a copy made
/// with SQLite's online backup) or a pg_dump archive in its custom format.
public enum BackupKind: Sendable {
    case sqlite
    case pgDump

    /// The suffix of the names `backup(FOLDER)` makes.
    public var suffix: String {
        switch self {
        case .sqlite: "sqlite"
        case .pgDump: "dump"
        }
    }

    /// Whether the file at `path` begins as this kind of file does.
    func hasItsHeader(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        switch self {
        case .sqlite: return handle.readData(ofLength: 16) == Data("SQLite format 3\0".utf8)
        case .pgDump: return handle.readData(ofLength: 5) == Data("PGDMP".utf8)
        }
    }
}

/// Which files `backup()` may replace (`overwrite = true`) and delete
/// (`keep = N`): one rule for both engines (docs/operations.md, "Backups
/// and restore"; ARCHITECTURE.md, decision 9). A file is
/// opsh's to replace or delete only when
/// - opsh wrote it there as a backup: the record opsh keeps beside each
///   backup it writes still names it by device and inode, size and time
///   (``WrittenFileRecord``), so a copy, a file written over it, or a file
///   of the same kind that someone else made is never one;
/// - and nothing uses it: it has one name (no hard link), no `-wal`,
///   `-shm` or `-journal` beside it (a database someone opened), and no
///   process holds a lock on it (fcntl's, POSIX or open-file, or flock's).
public enum BackupOwnership {
    /// nil when the file at `path` is a backup of `kind` that opsh wrote
    /// there and nothing uses; else why not, as the words after "it ".
    public static func refusal(_ path: String, kind: BackupKind) -> String? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return "is gone" }
        guard (status.st_mode & S_IFMT) == S_IFREG else { return "is not a regular file (opsh replaces only a backup file it wrote)" }
        if status.st_nlink > 1 { return "is in use: it has \(status.st_nlink) names (a hard link)" }
        for companion in ["-wal", "-shm", "-journal"] {
            var beside = stat()
            if lstat(path + companion, &beside) == 0 { return "is in use: \(path + companion) is beside it" }
        }
        if isLocked(path) { return "is in use: a process holds a lock on it" }
        guard let recorded = WrittenFileRecord.recorded(for: path) else {
            return "is not a backup opsh wrote there (opsh has no record of writing this file)"
        }
        guard WrittenFileRecord.current(path) == recorded else {
            return "is not the backup opsh wrote there (it was replaced, copied over or changed since: its inode, size or time is not the one opsh recorded)"
        }
        guard kind.hasItsHeader(path) else {
            return "is not a backup of this engine (\(kind == .sqlite ? "not an SQLite database" : "not a pg_dump archive"))"
        }
        return nil
    }

    /// Whether some process holds an advisory lock on the file: a POSIX or
    /// open-file lock (fcntl; SQLite's are POSIX locks) or a flock.
    static func isLocked(_ path: String) -> Bool {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return opsh_file_lock_conflicts(descriptor, 0, 0) == 1 || opsh_file_flock_held(descriptor) == 1
    }

    /// Deletes a backup opsh wrote, and its record, if it still is one
    /// nothing uses (checked again now); returns whether it did.
    static func remove(_ path: String, kind: BackupKind) throws -> Bool {
        guard refusal(path, kind: kind) == nil else { return false }
        guard unlink(path) == 0 || errno == ENOENT else { throw BackupFileError(action: "delete", path: path, code: errno) }
        WrittenFileRecord.remove(for: path)
        return true
    }
}

/// `backup(PATH, { keep = N })`'s rotation: in PATH's folder, the files
/// whose names equal PATH's except for their digits (`opsh-20240501.sqlite`,
/// `opsh-20240502.sqlite`, …) are the series; of those that are backups
/// opsh wrote and nothing uses (``BackupOwnership``), and that are not
/// the database itself, all but the N newest are deleted with their
/// records. Nothing else is ever deleted.
public struct BackupRotation {
    let folder: String
    let pattern: NSRegularExpression
    let kind: BackupKind
    /// Whether a path names the session's database (never a backup).
    let isDatabaseFile: (String) -> Bool

    /// - parameter path: the backup's final name (``Store/backupPath(for:)``).
    public init(path: String, kind: BackupKind, isDatabaseFile: @escaping (String) -> Bool = { _ in false }) throws {
        self.kind = kind
        self.isDatabaseFile = isDatabaseFile
        let name = (path as NSString).lastPathComponent
        folder = (path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent
        guard name.contains(where: \.isNumber) else {
            throw StoreError.refused(reason: "backup: keep needs a file name with a date or a number in it (e.g. os.date(\"opsh-%Y%m%d-%H%M%S.\(kind.suffix)\")), or a folder, to tell its backups apart; got \(name)")
        }
        var regex = "^"
        var inDigits = false
        for character in name {
            if character.isASCII && character.isNumber {
                if !inDigits { regex += "[0-9]+" }
                inDigits = true
            } else {
                inDigits = false
                regex += NSRegularExpression.escapedPattern(for: String(character))
            }
        }
        regex += "$"
        pattern = try NSRegularExpression(pattern: regex)
    }

    func matches(_ name: String) -> Bool {
        pattern.firstMatch(in: name, range: NSRange(name.startIndex..., in: name)) != nil
    }

    /// The backups beyond the `count` newest (the one just made counts and
    /// always stays), oldest last.
    public func doomed(keeping count: Int, newest: String) -> [String] {
        let manager = FileManager.default
        let names = (try? manager.contentsOfDirectory(atPath: folder))?.filter(matches) ?? []
        let newestName = (newest as NSString).lastPathComponent
        let dated = names.filter { $0 != newestName }
            .map { (folder as NSString).appendingPathComponent($0) }
            .filter { BackupOwnership.refusal($0, kind: kind) == nil && !isDatabaseFile($0) }
            .map { path -> (String, Date) in
                (path, (try? manager.attributesOfItem(atPath: path))?[.modificationDate] as? Date ?? .distantPast)
            }
        let ordered = dated.sorted { $0.1 != $1.1 ? $0.1 > $1.1 : $0.0 > $1.0 }.map(\.0)
        return Array(ordered.dropFirst(max(count - 1, 0)))
    }

    /// Deletes all but the `count` newest backups; returns the paths deleted.
    public func prune(keeping count: Int, newest: String) throws -> [String] {
        try doomed(keeping: count, newest: newest).filter { try BackupOwnership.remove($0, kind: kind) }
    }
}
