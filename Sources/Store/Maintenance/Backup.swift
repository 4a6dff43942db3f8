import Foundation
import GRDB

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
    ///   then only a backup opsh itself wrote there, unchanged and unused,
    ///   is replaced (``BackupOwnership``); every backup gets the record
    ///   that says so (``WrittenFileRecord``).
    ///
    /// - throws: ``StoreError/refused(reason:)`` for the refusals above,
    ///   ``StoreError/diskFull(path:)`` when the copy does not fit (nothing
    ///   is left behind), or the copy's failed check.
    @discardableResult
    public func backup(to destination: String, overwrite: Bool = false, pagesPerStep: Int32 = 256,
                       progress: ((MaintenanceProgress) -> Void)? = nil) throws -> BackupResult {
        let target = try BackupTarget(destination: destination, sourcePath: path, overwrite: overwrite, kind: .sqlite)
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
    /// What the backup is: only a backup of this kind that opsh wrote is
    /// replaced with `overwrite` (``BackupOwnership``).
    let kind: BackupKind

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

    init(destination: String, sourcePath: String?, overwrite: Bool, kind: BackupKind) throws {
        self.kind = kind
        let path = Self.finalPath(for: destination, suffix: kind.suffix)
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
            try refuseUnlessReplaceable()
        }
        try FileManager.default.createDirectory(atPath: self.folder, withIntermediateDirectories: true)
    }

    /// Refuses to replace what is at the final name unless it is a backup
    /// opsh wrote there and nothing uses.
    private func refuseUnlessReplaceable() throws {
        if let refusal = BackupOwnership.refusal(path, kind: kind) {
            throw StoreError.refused(reason: "backup will not overwrite \(path): it \(refusal)")
        }
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

    /// Gives the verified copy its final name: records it as opsh's backup
    /// there (``WrittenFileRecord``, before the name, so no published
    /// backup is without its record), then a hard link, which fails when a
    /// file appeared there meanwhile, or, when overwriting, a rename over
    /// the earlier backup (checked again now); then syncs the folder.
    func publish(_ temporary: String) throws {
        var existing = stat()
        let replacing = lstat(path, &existing) == 0
        if replacing {
            guard overwrite else { throw Self.appeared(path) }
            try refuseUnlessReplaceable()
        }
        try WrittenFileRecord.write(for: path, describing: temporary)
        if replacing {
            guard rename(temporary, path) == 0 else { throw BackupFileError(action: "rename to", path: path, code: errno) }
        } else if link(temporary, path) != 0 {
            let code = errno
            // The record names a file that did not get the name.
            if let written = WrittenFileRecord.current(temporary) { WrittenFileRecord.remove(for: path, ifNaming: written) }
            throw code == EEXIST ? Self.appeared(path) : BackupFileError(action: "create", path: path, code: code)
        } else {
            unlink(temporary)
        }
        try Self.sync(folder, directory: true)
    }

    private static func appeared(_ path: String) -> StoreError {
        .refused(reason: "backup destination \(path) appeared while the backup ran; the copy was not kept")
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
        // A backup's own temporaries, and those of a backup's record
        // (`..NAME.opsh-record.opsh-PID-N.tmp`, ``AtomicFile``): a backup
        // killed while it wrote its record leaves one.
        for name in names where name.hasPrefix(".") {
            let marker = name.contains(temporaryMarker) ? temporaryMarker
                : name.hasPrefix("..") && name.contains(recordTemporaryMarker) ? recordTemporaryMarker : nil
            guard let marker, let range = name.range(of: marker, options: .backwards) else { continue }
            let rest = name[range.upperBound...]
            let suffixes = marker == temporaryMarker ? [".tmp", ".tmp-journal", ".tmp-wal", ".tmp-shm"] : [".tmp"]
            guard let dash = rest.firstIndex(of: "-"), let pid = Int32(rest[..<dash]),
                  suffixes.contains(where: { rest.hasSuffix($0) }) else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH {
                unlink((folder as NSString).appendingPathComponent(name))
            }
        }
    }

    /// What ``AtomicFile`` adds to a record's name (`.NAME.opsh-record`)
    /// for its temporary: `.opsh-PID-N.tmp`.
    static let recordTemporaryMarker = ".opsh-record.opsh-"
}
