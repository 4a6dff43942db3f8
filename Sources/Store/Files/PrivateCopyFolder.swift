import Foundation

/// A folder of the temporary folder that one opsh process makes for a copy
/// it works on (the interactive `--dry-run`'s copy of the database:
/// docs/operations.md, "Beside a live backend"), and removes when it ends.
///
/// A process that is killed cannot remove its folder, so the next one
/// removes the folders whose owner is gone (``removeStale(prefix:in:)``),
/// and only those: the folder's name and the owner record inside it
/// (`.opsh-owner`, written by opsh when it made the folder) name the
/// owner by its pid, its start time and the machine's boot, so a pid used
/// again by a later process does not keep a folder alive and a running
/// owner's folder is never touched. Nothing opsh did not make is deleted:
/// a folder is opsh's when it is a real folder of this user, mode 0700,
/// with an owner record that agrees with its name; inside it only the
/// copy, what SQLite and opsh put beside it (`-wal`, `-shm`, `-journal`,
/// its backup record and temporaries) and the owner record are removed, and
/// the folder only if nothing else is left in it.
public struct PrivateCopyFolder: Sendable {
    /// The folder.
    public let path: String
    /// The copy's path inside it.
    public let file: String

    static let ownerRecord = ".opsh-owner"
    static let header = "opsh private copy: owner 1"

    /// Makes `TEMPORARY/PREFIX-PID-START-RANDOM` (mode 0700, made
    /// exclusively) with its owner record, for a copy named `fileName`.
    public static func make(prefix: String, fileName: String,
                            in temporary: String = NSTemporaryDirectory()) throws -> PrivateCopyFolder {
        let pid = getpid()
        let start = ProcessDescription.startTicks(pid) ?? 0
        let path = (temporary as NSString).appendingPathComponent(
            "\(prefix)-\(pid)-\(start)-\(String(UInt64.random(in: 0...UInt64.max), radix: 16))")
        guard mkdir(path, 0o700) == 0 else {
            throw StoreError.refused(reason: "cannot make the folder \(path): \(String(cString: strerror(errno)))")
        }
        let record = "\(header)\npid \(pid)\nstart \(start)\nboot \(ProcessDescription.bootID)\nfile \(fileName)\n"
        do {
            try AtomicFile.write(Data(record.utf8), to: (path as NSString).appendingPathComponent(ownerRecord))
        } catch {
            rmdir(path)
            throw StoreError.refused(reason: "cannot make the folder \(path): \(error)")
        }
        return PrivateCopyFolder(path: path, file: (path as NSString).appendingPathComponent(fileName))
    }

    /// Removes the copy, what was made beside it, the owner record and the
    /// folder (this process's own).
    public func remove() {
        Self.removeContents(of: path, file: (file as NSString).lastPathComponent)
    }

    /// Removes the folders `PREFIX-…` in `temporary` that opsh made for a
    /// process that is gone; returns their paths.
    @discardableResult
    public static func removeStale(prefix: String, in temporary: String = NSTemporaryDirectory()) -> [String] {
        var removed: [String] = []
        for name in (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? [] where name.hasPrefix(prefix + "-") {
            let folder = (temporary as NSString).appendingPathComponent(name)
            guard let owner = owner(of: folder, named: String(name.dropFirst(prefix.count + 1))), !owner.isRunning else { continue }
            removeContents(of: folder, file: owner.file)
            removed.append(folder)
        }
        return removed
    }

    /// Who made `folder`, when it is a folder opsh made: a real folder of
    /// this user, mode 0700, whose owner record agrees with its name
    /// (`PID-START-RANDOM`).
    static func owner(of folder: String, named suffix: String) -> Owner? {
        var status = stat()
        guard lstat(folder, &status) == 0, (status.st_mode & S_IFMT) == S_IFDIR, status.st_uid == getuid(),
              status.st_mode & 0o777 == 0o700 else { return nil }
        let record = (folder as NSString).appendingPathComponent(ownerRecord)
        var recordStatus = stat()
        guard lstat(record, &recordStatus) == 0, (recordStatus.st_mode & S_IFMT) == S_IFREG, recordStatus.st_size < 4096,
              let data = FileManager.default.contents(atPath: record) else { return nil }
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n")
        guard lines.first == Substring(header) else { return nil }
        var fields: [Substring: String] = [:]
        for line in lines.dropFirst() {
            guard let space = line.firstIndex(of: " ") else { return nil }
            fields[line[..<space]] = String(line[line.index(after: space)...])
        }
        guard let pid = fields["pid"].flatMap({ Int32($0) }), let start = fields["start"].flatMap({ UInt64($0) }),
              let boot = fields["boot"], let file = fields["file"], !file.isEmpty, !file.contains("/"),
              suffix.hasPrefix("\(pid)-\(start)-") else { return nil }
        return Owner(pid: pid, start: start, boot: boot, file: file)
    }

    struct Owner {
        var pid: Int32
        var start: UInt64
        var boot: String
        /// The copy's name in the folder.
        var file: String

        /// The same process still runs: this boot, and the pid's start time.
        var isRunning: Bool {
            boot == ProcessDescription.bootID && ProcessDescription.startTicks(pid) == start
        }
    }

    /// Removes from `folder` the copy named `file`, the files SQLite and
    /// opsh make beside it, and the owner record, then the folder if it is
    /// empty (anything else keeps it).
    private static func removeContents(of folder: String, file: String) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
            let besideIt = name == file || name.hasPrefix(file + "-")            // -wal, -shm, -journal
                || name.hasPrefix("." + file + ".") || name.hasPrefix(".." + file + ".")   // its record, backup and record temporaries
            if besideIt { unlink((folder as NSString).appendingPathComponent(name)) }
        }
        unlink((folder as NSString).appendingPathComponent(ownerRecord))
        rmdir(folder)
    }
}
