import Foundation
import TextCodec

/// Audit rows kept for later: a row that could not be written (another
/// process held the lock it needs past its wait, the database refused
/// it) is kept here, and the next run on the same database that writes
/// its own row writes these first (``AuditConnection/record(_:code:waitingAtMost:)``).
/// So a read beside a backend holding the write lock loses no row and
/// prints nothing (docs/operations.md, "The audit trail").
///
/// One file per row, `UUID.json`, in `$XDG_STATE_HOME/opsh/audit-spool`
/// (mode 0700): made atomically (``AtomicFile``), never named from the
/// row's data, and holding the database's identity (an SQLite file's
/// device and inode, a PostgreSQL URL without its password), so a row
/// goes only to the database it belongs to. The code in it is masked as
/// the trail keeps it. Only files that look like the spool's own, are
/// regular files and belong to this user are read or removed.
public struct AuditSpool: Sendable {
    public let directory: String

    public init(directory: String = DatabaseLocation.stateDirectory() + "/audit-spool") {
        self.directory = directory
    }

    /// Keeps `entry` for `database`; returns the file's path.
    @discardableResult
    public func keep(_ entry: AuditEntry, database: String) throws -> String {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let path = directory + "/" + UUID().uuidString + ".json"
        try AtomicFile.write(Data(AuditSpoolFile.document(entry, database: database).compactText().utf8), to: path)
        return path
    }

    /// The rows kept for `database`, oldest first, each claimed for this
    /// process (renamed to `UUID.json.PID`), so that two runs writing the
    /// spool at once do not write a row twice. A file claimed by a process
    /// that is gone is claimed again.
    public func claimPending(database: String) -> [(file: String, entry: AuditEntry)] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var found: [(file: String, entry: AuditEntry)] = []
        for name in names {
            guard let (base, owner) = Self.parse(name) else { continue }
            if let owner, owner != getpid(), kill(owner, 0) == 0 || errno != ESRCH { continue }
            let path = directory + "/" + name
            var status = stat()
            guard lstat(path, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, status.st_uid == geteuid(),
                  let data = FileManager.default.contents(atPath: path),
                  let document = try? JSONParser.parse(Array(data)),
                  let (kept, entry) = AuditSpoolFile.read(document), kept == database
            else { continue }
            let claimed = directory + "/" + base + ".\(getpid())"
            guard path == claimed || rename(path, claimed) == 0 else { continue }
            found.append((claimed, entry))
        }
        return found.sorted { $0.entry.startedAt < $1.entry.startedAt }
    }

    /// Removes a claimed file once its row is written.
    public func remove(_ file: String) {
        guard isOwn(file) else { return }
        unlink(file)
    }

    /// Gives a claimed file back, its row not written: the next run tries again.
    public func release(_ file: String) {
        guard isOwn(file), let (base, _) = Self.parse((file as NSString).lastPathComponent) else { return }
        rename(file, directory + "/" + base)
    }

    private func isOwn(_ file: String) -> Bool {
        (file as NSString).deletingLastPathComponent == directory && Self.parse((file as NSString).lastPathComponent) != nil
    }

    /// `UUID.json` (as ``keep(_:database:)`` names a file) and, claimed,
    /// `UUID.json.PID`: the unclaimed name and the claiming process.
    static func parse(_ name: String) -> (base: String, owner: pid_t?)? {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3, parts[1] == "json", UUID(uuidString: String(parts[0])) != nil else { return nil }
        if parts.count == 2 { return (name, nil) }
        guard let owner = pid_t(parts[2]), owner > 0 else { return nil }
        return (parts[0] + ".json", owner)
    }
}
