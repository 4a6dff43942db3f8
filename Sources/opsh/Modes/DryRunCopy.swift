import Foundation
import Store

/// An interactive `--dry-run` works on a private copy of the database,
/// taken with SQLite's online backup when the shell starts: the operator may
/// sit at the prompt after writing without holding the live database's
/// write lock (a dry run on the live file would hold it from its first
/// write until the shell ends, and every backend write would fail after its
/// busy timeout meanwhile).
///
/// Limits (docs/operations.md, "Beside a live backend"): the copy does
/// not see what the backend writes after it was taken, and a database
/// larger than ``largest`` is not copied (the
/// dry run then runs on the live file, locking it from its first write).
/// The copy lives in a ``PrivateCopyFolder`` of the temporary folder; the
/// copies of dry runs that were killed are removed when the next starts.
struct DryRunCopy {
    /// Above this (database and WAL), copying at start costs too much:
    /// 512 MB, or `OPSH_DRY_RUN_COPY_LIMIT_MB`.
    static var largest: Int64 {
        if let text = getenv("OPSH_DRY_RUN_COPY_LIMIT_MB").map({ String(cString: $0) }), let megabytes = Int64(text), megabytes >= 0 {
            return megabytes << 20
        }
        return 512 << 20
    }

    let folder: PrivateCopyFolder
    let source: String
    let taken: Date

    /// The copy the session opens.
    var path: String { folder.file }

    /// The copy, or nil when the database is too large (with the reason).
    static func make(of options: CommonOptions) throws -> (copy: DryRunCopy?, reason: String?) {
        // Only a file can be copied (a server's database keeps its dry run
        // in one transaction instead).
        guard Databases.engine(of: options.db) == .sqlite else { return (nil, nil) }
        var storeOptions = StoreOptions(readOnly: true, busyTimeout: options.busyTimeout)
        storeOptions.createIfMissing = false
        let source = try Store.prepare(path: options.db, options: storeOptions)
        guard let sourcePath = source.path else { return (nil, nil) }
        let size = fileSize(sourcePath) + fileSize(sourcePath + "-wal")
        if size > largest {
            return (nil, "the database (\(size >> 20) MB) is too large for a private copy: each chunk re-applies what the earlier ones changed and is rolled back, holding the write lock only while it runs (from its start once the session has changed anything)")
        }
        // The copies of dry runs that were killed (their owner is gone).
        PrivateCopyFolder.removeStale(prefix: folderPrefix)
        let folder = try PrivateCopyFolder.make(prefix: folderPrefix, fileName: (sourcePath as NSString).lastPathComponent)
        do {
            try source.backup(to: folder.file)
        } catch {
            folder.remove()
            throw error
        }
        return (DryRunCopy(folder: folder, source: sourcePath, taken: Date()), nil)
    }

    static let folderPrefix = "opsh-dry-run"

    /// Removes the copy and its folder (both made by opsh).
    func remove() {
        folder.remove()
    }

    private static func fileSize(_ path: String) -> Int64 {
        var status = stat()
        return stat(path, &status) == 0 ? Int64(status.st_size) : 0
    }
}
