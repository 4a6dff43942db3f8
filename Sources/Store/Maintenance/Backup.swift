import Foundation
import GRDB
import GRDBSQLite

/// What ``Store/backup(to:overwrite:pagesPerStep:progress:)`` made.
public struct BackupResult: Sendable, Equatable {
    /// The verified copy (inside the folder when a folder was given).
    public var path: String
    public var pages: Int
}

extension Store {
    /// Copies the live database to `destination` with SQLite's online backup
    /// (other connections keep reading and writing), in steps so that
    /// `progress` is told how far it got.
    ///
    /// Nothing opsh did not make is deleted or overwritten, and a file
    /// appears at its final name only whole and verified:
    /// - the copy is written to a temporary file beside the destination
    ///   (mode 0600: it holds the same secrets as the database), checked
    ///   with `integrity_check`, synced, and only then linked to its final
    ///   name (which fails if a file appeared there meanwhile), and the
    ///   folder is synced; a kill at any moment leaves no file at the final
    ///   name, only a temporary one that the next backup into that folder
    ///   removes once its process is gone;
    /// - a folder as `destination` gets the copy inside it, named
    ///   `opsh-YYYYMMDD-HHMMSS.sqlite` (UTC);
    /// - the database itself, its `-wal` and `-shm`, under any name (a
    ///   symbolic or hard link, another spelling of the path) are refused:
    ///   they are compared by device and inode;
    /// - an existing destination is refused, unless `overwrite`, and even
    ///   then only a regular file that is itself an opsh database (an
    ///   earlier backup) is replaced.
    ///
    /// - throws: ``StoreError/refused(reason:)`` for the refusals above,
    ///   ``StoreError/diskFull(path:)`` when the copy does not fit (nothing
    ///   is left behind), or the copy's failed check.
    @discardableResult
    public func backup(to destination: String, overwrite: Bool = false, pagesPerStep: Int32 = 256,
                       progress: ((MaintenanceProgress) -> Void)? = nil) throws -> BackupResult {
        let target = try BackupTarget(destination: destination, sourcePath: path, overwrite: overwrite)
        BackupTarget.removeAbandonedTemporaries(in: target.folder)
        let temporary = try target.createTemporary()
        var pages = 0
        // The file is gone from its path: rescue the copy still open.
        if replacedFileProblem != nil, let opened = openedFileIdentity {
            do {
                try OpenCopyRescue.rescue(opened: opened, path: path ?? destination, into: temporary)
                BackupTarget.remove(temporary + "-wal")
                try target.publish(temporary)
            } catch {
                BackupTarget.remove(temporary)
                throw Self.diskFullOr(error, folder: target.folder)
            }
            return BackupResult(path: target.path, pages: Int(Store.fileSize(target.path) / 4096))
        }
        do {
            let copy = try DatabaseQueue(path: temporary)
            do {
                try writer.backup(to: copy, pagesPerStep: pagesPerStep) { step in
                    pages = step.totalPageCount
                    progress?(MaintenanceProgress(completed: step.completedPageCount, total: step.totalPageCount))
                }
                let problems = try copy.read { db in try String.fetchAll(db, sql: "PRAGMA integrity_check") }
                // A copy of a WAL database is in WAL mode: make it one file
                // again, so that opening it (to check it, to restore it)
                // leaves no -wal and -shm beside it.
                try copy.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = DELETE") }
                try copy.close()
                if problems != ["ok"] {
                    throw StoreError.corrupt(path: destination, detail: "the backup failed its integrity check: \(problems.joined(separator: "; "))")
                }
            } catch {
                try? copy.close()
                throw error
            }
            try BackupTarget.sync(temporary)
            try target.publish(temporary)
        } catch {
            BackupTarget.remove(temporary)
            throw Self.diskFullOr(error, folder: target.folder)
        }
        return BackupResult(path: target.path, pages: pages)
    }

    /// Where `backup(to: destination)` would write: inside it when it is a
    /// folder, under a name made from the time.
    public static func backupPath(for destination: String) -> String {
        BackupTarget.finalPath(for: destination)
    }

    /// Whether `path` is a regular file holding an opsh database (an
    /// earlier backup): what rotation may delete and overwriting replace.
    public static func isOpshBackup(atPath path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG && BackupTarget.isOpshDatabase(path)
    }

    /// Whether `path` names this store's database, its -wal or -shm (by
    /// device and inode).
    public func isDatabaseFile(_ path: String) -> Bool {
        guard let source = self.path else { return false }
        return (try? BackupTarget.refuseSource(path, sourcePath: source)) == nil
    }

    /// SQLite reports a full disk during a backup as code 13 with the text
    /// "not an error" (the backup's connection has no message): say what
    /// happened.
    private static func diskFullOr(_ error: any Error, folder: String) -> any Error {
        if let error = error as? DatabaseError, error.resultCode == .SQLITE_FULL {
            return StoreError.diskFull(path: folder)
        }
        if let error = error as? BackupFileError, error.code == ENOSPC || error.code == EDQUOT {
            return StoreError.diskFull(path: folder)
        }
        return error
    }
}

/// A file system call that failed, with errno.
struct BackupFileError: Error, CustomStringConvertible {
    var action: String
    var path: String
    var code: Int32
    var description: String { "cannot \(action) \(path): \(String(cString: strerror(code)))" }
}

/// Where a backup goes and the checks that keep it from destroying
/// anything: see ``Store/backup(to:overwrite:pagesPerStep:progress:)``.
struct BackupTarget {
    /// The final name.
    let path: String
    let folder: String
    let overwrite: Bool
    /// Whether a file is an earlier backup of this kind (only those are
    /// replaced with `overwrite`).
    var isEarlierBackup: (String) -> Bool = BackupTarget.isOpshDatabase

    static let temporaryMarker = ".opsh-backup-"

    static func finalPath(for destination: String, suffix: String = "sqlite") -> String {
        var status = stat()
        guard stat(destination, &status) == 0, (status.st_mode & S_IFMT) == S_IFDIR else { return destination }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "'opsh-'yyyyMMdd'-'HHmmss'.\(suffix)'"
        return (destination as NSString).appendingPathComponent(formatter.string(from: Date()))
    }

    init(destination: String, sourcePath: String?, overwrite: Bool, suffix: String = "sqlite",
         isEarlierBackup: @escaping (String) -> Bool = BackupTarget.isOpshDatabase) throws {
        self.isEarlierBackup = isEarlierBackup
        let path = Self.finalPath(for: destination, suffix: suffix)
        self.path = path
        let folder = (path as NSString).deletingLastPathComponent
        self.folder = folder.isEmpty ? "." : folder
        self.overwrite = overwrite
        if let sourcePath { try Self.refuseSource(path, sourcePath: sourcePath) }
        var existing = stat()
        if lstat(path, &existing) == 0 {
            guard overwrite else {
                throw StoreError.refused(reason: "backup destination \(path) exists; choose another path (or a folder), or allow overwriting an earlier backup with { overwrite = true }")
            }
            guard (existing.st_mode & S_IFMT) == S_IFREG, isEarlierBackup(path) else {
                throw StoreError.refused(reason: "backup will not overwrite \(path): it is not an earlier opsh backup (only a regular file holding an opsh backup is replaced)")
            }
        }
        try FileManager.default.createDirectory(atPath: self.folder, withIntermediateDirectories: true)
    }

    /// The database, its -wal and -shm, compared by device and inode, so
    /// that no spelling or link of them is a destination.
    static func refuseSource(_ destination: String, sourcePath: String) throws {
        var target = stat()
        guard stat(destination, &target) == 0 else { return }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            var source = stat()
            if stat(sourcePath + suffix, &source) == 0, source.st_dev == target.st_dev, source.st_ino == target.st_ino {
                throw StoreError.refused(reason: "backup destination \(destination) is the database being backed up (\(sourcePath + suffix)); choose another path")
            }
        }
    }

    /// A regular file whose content is an SQLite database with opsh's
    /// migrations table: a backup (or database) opsh made.
    static func isOpshDatabase(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        let header = handle.readData(ofLength: 16)
        try? handle.close()
        guard header == Data("SQLite format 3\0".utf8) else { return false }
        // immutable: no locks, no -shm or -wal made beside a file that may
        // not be opsh's.
        var uri = "file:"
        for character in path.unicodeScalars {
            switch character {
            case "%": uri += "%25"
            case "?": uri += "%3F"
            case "#": uri += "%23"
            default: uri.unicodeScalars.append(character)
            }
        }
        uri += "?immutable=1"
        var connection: OpaquePointer?
        defer { sqlite3_close_v2(connection) }
        guard sqlite3_open_v2(uri, &connection, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nil) == SQLITE_OK else { return false }
        var statement: OpaquePointer?
        defer { sqlite3_finalize(statement) }
        guard sqlite3_prepare_v2(connection, "SELECT 1 FROM grdb_migrations LIMIT 1", -1, &statement, nil) == SQLITE_OK else { return false }
        let code = sqlite3_step(statement)
        return code == SQLITE_ROW || code == SQLITE_DONE
    }

    /// `.NAME.opsh-backup-PID-RANDOM.tmp` beside the final name, made
    /// exclusively with mode 0600.
    func createTemporary() throws -> String {
        let name = (path as NSString).lastPathComponent
        let temporary = (folder as NSString).appendingPathComponent(
            ".\(name)\(Self.temporaryMarker)\(getpid())-\(UInt32.random(in: 0...UInt32.max)).tmp")
        let descriptor = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw BackupFileError(action: "create", path: temporary, code: errno) }
        close(descriptor)
        return temporary
    }

    /// Gives the verified copy its final name: a hard link, which fails
    /// when a file appeared there meanwhile, or a rename over an earlier
    /// backup when overwriting; then syncs the folder.
    func publish(_ temporary: String) throws {
        if link(temporary, path) != 0 {
            let code = errno
            guard code == EEXIST, overwrite, isEarlierBackup(path) else {
                throw code == EEXIST
                    ? StoreError.refused(reason: "backup destination \(path) appeared while the backup ran; the copy was not kept")
                    : BackupFileError(action: "create", path: path, code: code)
            }
            guard rename(temporary, path) == 0 else { throw BackupFileError(action: "rename to", path: path, code: errno) }
        } else {
            unlink(temporary)
        }
        try Self.sync(folder, directory: true)
    }

    static func sync(_ path: String, directory: Bool = false) throws {
        let descriptor = open(path, (directory ? O_RDONLY | O_DIRECTORY : O_RDWR) | O_CLOEXEC)
        guard descriptor >= 0 else { throw BackupFileError(action: "open", path: path, code: errno) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw BackupFileError(action: "sync", path: path, code: errno) }
    }

    static func remove(_ temporary: String) {
        for suffix in ["", "-journal", "-wal", "-shm"] { unlink(temporary + suffix) }
    }

    /// Temporary files of backups whose process is gone (killed midway):
    /// only names of the form this type makes, with a pid that no longer
    /// runs.
    static func removeAbandonedTemporaries(in folder: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return }
        for name in names where name.hasPrefix(".") && name.contains(temporaryMarker) {
            guard let range = name.range(of: temporaryMarker) else { continue }
            let rest = name[range.upperBound...]
            guard let dash = rest.firstIndex(of: "-"), let pid = Int32(rest[..<dash]),
                  [".tmp", ".tmp-journal", ".tmp-wal", ".tmp-shm"].contains(where: { rest.hasSuffix($0) }) else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH {
                unlink((folder as NSString).appendingPathComponent(name))
            }
        }
    }
}
