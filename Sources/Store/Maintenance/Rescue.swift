import Foundation
import GRDBSQLite

/// The copy of a database file that this process still has open after the
/// file was deleted or replaced at its path.
///
/// SQLite keeps using the inode it opened, but its connections fail on it
/// once the name is gone ("disk I/O error"), so `backup()` cannot read it
/// through SQLite. The kernel still can: `/proc/self/fd/N` opens the
/// unlinked inode. The rescue copies those bytes and the `-wal` beside
/// them into a new file, lets SQLite recover the WAL into it, and checks it.
enum OpenCopyRescue {
    /// Writes the open copy of the database into `temporary` (a new file,
    /// made empty by the caller), whole and checked.
    static func rescue(opened: FileIdentity, path: String, into temporary: String) throws {
        guard let main = descriptorPath(matching: opened) else {
            throw StoreError.refused(reason: "the database file \(path) is gone and this process no longer has it open: nothing to rescue")
        }
        try copy(from: main, to: temporary)
        // The WAL: the one beside the path if it is still there, else the
        // one this process has open.
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        if let wal = descriptorPath(named: absolute + "-wal") {
            try copy(from: wal, to: temporary + "-wal")
        }
        var handle: OpaquePointer?
        defer { sqlite3_close_v2(handle) }
        guard sqlite3_open_v2(temporary, &handle, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK, let handle else {
            throw StoreError.corrupt(path: path, detail: "the rescued copy does not open")
        }
        var problems: [String] = []
        for sql in ["PRAGMA wal_checkpoint(TRUNCATE)", "PRAGMA journal_mode = DELETE"] {
            guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else {
                throw StoreError.corrupt(path: path, detail: "the rescued copy: \(String(cString: sqlite3_errmsg(handle)))")
            }
        }
        var statement: OpaquePointer?
        defer { sqlite3_finalize(statement) }
        sqlite3_prepare_v2(handle, "PRAGMA integrity_check", -1, &statement, nil)
        while sqlite3_step(statement) == SQLITE_ROW {
            problems.append(sqlite3_column_text(statement, 0).map { String(cString: $0) } ?? "?")
        }
        guard problems == ["ok"] else {
            throw StoreError.corrupt(path: path, detail: "the rescued copy failed its integrity check: \(problems.joined(separator: "; "))")
        }
    }

    /// `/proc/self/fd/N` of an open descriptor on the file `identity`.
    private static func descriptorPath(matching identity: FileIdentity) -> String? {
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            let candidate = "/proc/self/fd/" + entry
            var status = stat()
            if stat(candidate, &status) == 0, UInt64(status.st_dev) == identity.device, UInt64(status.st_ino) == identity.inode {
                return candidate
            }
        }
        return nil
    }

    /// `/proc/self/fd/N` of an open descriptor on `path` (or on the file
    /// that had that name before it was deleted).
    private static func descriptorPath(named path: String) -> String? {
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            let candidate = "/proc/self/fd/" + entry
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: candidate) else { continue }
            if target == path || target == path + " (deleted)" { return candidate }
        }
        return nil
    }

    private static func copy(from source: String, to destination: String) throws {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw BackupFileError(action: "read", path: source, code: errno) }
        defer { close(input) }
        let output = open(destination, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw BackupFileError(action: "create", path: destination, code: errno) }
        defer { close(output) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = read(input, &buffer, buffer.count)
            if count < 0 { if errno == EINTR { continue }; throw BackupFileError(action: "read", path: source, code: errno) }
            if count == 0 { break }
            var offset = 0
            while offset < count {
                let written = buffer[offset..<count].withUnsafeBytes { write(output, $0.baseAddress, $0.count) }
                if written < 0 { if errno == EINTR { continue }; throw BackupFileError(action: "write", path: destination, code: errno) }
                offset += written
            }
        }
        guard fsync(output) == 0 else { throw BackupFileError(action: "sync", path: destination, code: errno) }
    }
}
