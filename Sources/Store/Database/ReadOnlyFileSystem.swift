import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A database on a file system mounted read-only (a snapshot, a backup
/// volume, a `ro` bind mount).
///
/// SQLite opens such a file read-only by itself, so writes used to fail one
/// by one with "attempt to write a readonly database"; and a WAL database
/// whose `-shm` file is gone could not be read at all ("unable to open
/// database file"): SQLite needs to create `-shm` even to read. opsh refuses
/// to open it for writing, with the reason, and `--read-only` opens it as
/// immutable (no locks, no `-shm`), which is exact: nothing can change it.
enum ReadOnlyFileSystem {
    /// Whether the folder holding `path` is on a read-only file system.
    static func holds(_ path: String) -> Bool {
        let folder = (path as NSString).deletingLastPathComponent
        var info = statvfs()
        guard statvfs(folder.isEmpty ? "." : folder, &info) == 0 else { return false }
        return info.f_flag & UInt(ST_RDONLY) != 0
    }

    /// The name SQLite should open `path` by for reading: an `immutable=1`
    /// URI, unless a `-wal` file holds frames (immutable would ignore them;
    /// SQLite then reads them through the existing `-shm`).
    static func readingName(for path: String) -> String {
        if DatabaseFileInspector.walHoldsFrames(path) { return path }
        // URI syntax: '%', '?' and '#' in the path must be escaped.
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "%?#")
        let escaped = path.addingPercentEncoding(withAllowedCharacters: allowed) ?? path
        return "file:\(escaped)?immutable=1"
    }
}
