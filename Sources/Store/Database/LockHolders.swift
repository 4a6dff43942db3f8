import Foundation

/// Which processes hold locks on a database, read from `/proc/locks`: when
/// a write gives up waiting ("database is locked"), the operator learns
/// who to look at. SQLite's WAL-mode write lock is a POSIX lock on bytes of
/// the `-shm` file; a rollback-journal database locks the main file.
public enum LockHolders {
    public struct Holder: Equatable, Sendable {
        public var pid: Int32
        public var command: String
        /// "writing" (the write lock's byte of the -shm, or an exclusive
        /// lock on the file), else "reading".
        public var kind: String
    }

    /// The other processes holding locks on `path`, its `-shm` or `-wal`,
    /// writers first; empty where `/proc/locks` cannot be read.
    public static func of(_ path: String) -> [Holder] {
        var inodes: [UInt64: String] = [:]
        for suffix in ["", "-shm", "-wal"] {
            var status = stat()
            if stat(path + suffix, &status) == 0 { inodes[UInt64(status.st_ino)] = suffix }
        }
        guard !inodes.isEmpty, let table = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return [] }
        var found: [Int32: Holder] = [:]
        for line in table.split(separator: "\n") {
            // "1: POSIX  ADVISORY  WRITE 30546 fe:00:16237444 120 120"
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 8, let pid = Int32(fields[4]), pid != getpid(),
                  let inode = fields[5].split(separator: ":").last.flatMap({ UInt64($0) }),
                  let suffix = inodes[inode] else { continue }
            // `opsh run`'s lock (DatabaseFileRunLock) is far past SQLite's bytes: not SQLite's.
            if let start = Int64(fields[6]), start >= DatabaseFileRunLock.firstByte { continue }
            // WAL mode: byte 120 of the -shm is the write lock.
            let writing = fields[3] == "WRITE" && (suffix != "-shm" || fields[6] == "120")
            let command = (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
            if writing || found[pid] == nil {
                found[pid] = Holder(pid: pid, command: command, kind: writing ? "writing" : "reading")
            }
        }
        return found.values.sorted { ($0.kind == "writing" ? 0 : 1, $0.pid) < ($1.kind == "writing" ? 0 : 1, $1.pid) }
    }

    /// "held by sqlite3 (pid 30546, writing)", or nil when none is known.
    /// Another opsh is named from its lock-owner record (``LockOwner``):
    /// "held by opsh (pid 30546, user alice, script /srv/x.lua, holding
    /// the write lock since 02:15:03 UTC (42s), writing)".
    public static func sentence(for path: String) -> String? {
        let holders = of(path)
        guard !holders.isEmpty else { return nil }
        return "held by " + holders.map { holder in
            if let record = LockOwner.record(of: holder.pid, database: path) {
                return LockOwner.describe(record).dropLast() + ", \(holder.kind))"
            }
            return "\(holder.command) (pid \(holder.pid), \(holder.kind))"
        }.joined(separator: ", ")
    }
}
