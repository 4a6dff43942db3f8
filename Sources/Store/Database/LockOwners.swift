import Foundation
import Synchronization

/// A small record per opsh process saying what it is (pid, user, script or
/// shell) and since when it holds the database's write lock, so that a
/// write that gives up waiting can name the other opsh rather than only
/// a pid from `/proc/locks` (``LockHolders``).
///
/// Where: one file per process in `/tmp/opsh-lock-owners/DEV-INODE/PID`,
/// the folder keyed by the database file's device and inode (any name of
/// the file finds it; the folders are shared by every user, mode 1777, and
/// a record counts only when its owner is the process's user). Not in the
/// database: writing there would need the very lock it describes.
/// ARCHITECTURE.md, "Audit and lock-owner records".
///
/// When: the file is made (atomically: written under a temporary name,
/// then renamed) at the process's first long write transaction
/// (`db.transaction`, a dry run's first write, a shell chunk's first
/// write) and updated in place at the start and end of each one (one
/// `pwrite` of a fixed-width field, not per statement); it is removed at
/// exit. A record whose process is gone (or whose pid was reused: the
/// process start time differs) is ignored.
public enum LockOwner {
    /// What a record says.
    public struct Info: Sendable, Equatable {
        public var pid: Int32
        public var user: String
        /// The script's path, "shell", or "-e".
        public var script: String
        /// When the long write transaction it is in began; nil: none.
        public var writingSince: Double?
    }

    public static let folder = "/tmp/opsh-lock-owners"

    private struct State {
        var script = "opsh"
        var file: Int32 = -1
        var path: String?
        var database: String?
    }

    /// A class with a lock rather than a `static let` `Mutex` of a struct:
    /// the static release build (Swift 6.3.1, -static-executable) left such
    /// a Mutex's value zeroed — `file` 0 instead of -1, so the first record
    /// closed standard input and the shell ended after its first write.
    private static let state = Locked(State())
    /// `since=` then 20 characters: the field updated in place.
    private static let sinceWidth = 20

    /// What this process is: a script's path, "shell" or "-e".
    public static func configure(script: String) {
        state.withLock { $0.script = script }
    }

    /// A long write transaction began on the database at `path`.
    public static func beganWriting(database path: String?) {
        guard let path else { return }
        update(database: path, since: Date().timeIntervalSince1970)
    }

    /// The long write transaction ended.
    public static func endedWriting() {
        let database = state.withLock { $0.database }
        guard let database else { return }
        update(database: database, since: 0)
    }

    private static func update(database: String, since: Double) {
        state.withLock { state in
            if state.file < 0 || state.database != database {
                guard since > 0 else { return }
                create(&state, database: database)
            }
            guard state.file >= 0 else { return }
            let field = Array(String(format: "%020.3f", since).utf8.prefix(sinceWidth))
            _ = field.withUnsafeBytes { pwrite(state.file, $0.baseAddress, field.count, 6) }
        }
    }

    private static func create(_ state: inout State, database: String) {
        remove(&state)
        guard let directory = directory(for: database, creating: true) else { return }
        let path = directory + "/\(getpid())"
        let text = "since=" + String(format: "%020.3f", 0.0) + "\n"
            + "pid=\(getpid())\nstart=\(processStart(getpid()) ?? "")\nuser=\(AuditTrail.currentUser)\nscript=\(String(state.script.map { $0 == "\n" ? " " : $0 }))\n"
        let temporary = path + ".tmp"
        let descriptor = open(temporary, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard descriptor >= 0 else { return }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, bytes.count) }
        close(descriptor)
        guard written == bytes.count, rename(temporary, path) == 0 else {
            unlink(temporary)
            return
        }
        state.file = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
        state.path = path
        state.database = database
        registerRemovalAtExit()
    }

    private static func remove(_ state: inout State) {
        if state.file >= 0 { close(state.file) }
        if let path = state.path {
            unlink(path)
            // The database's folder goes with its last record (rmdir
            // refuses a folder that still holds another process's).
            rmdir((path as NSString).deletingLastPathComponent)
        }
        state.file = -1
        state.path = nil
        state.database = nil
    }

    /// Removes this process's record (at exit).
    public static func removeRecord() {
        state.withLock { remove(&$0) }
    }

    private static let registered = Locked(false)
    private static func registerRemovalAtExit() {
        registered.withLock { done in
            guard !done else { return }
            done = true
            atexit { LockOwner.removeRecord() }
        }
    }

    /// `/tmp/opsh-lock-owners/DEV-INODE` for the database file.
    static func directory(for database: String, creating: Bool) -> String? {
        var status = stat()
        guard stat(database, &status) == 0 else { return nil }
        let directory = folder + "/\(UInt64(status.st_dev))-\(UInt64(status.st_ino))"
        if creating {
            for path in [folder, directory] where mkdir(path, 0o1777) == 0 {
                chmod(path, 0o1777)  // whatever the umask
            }
        }
        return directory
    }

    /// Field 22 of /proc/PID/stat: when the process started, in clock ticks.
    static func processStart(_ pid: Int32) -> String? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, so start time (22) is index 19.
        return fields.count > 19 ? String(fields[19]) : nil
    }

    /// The record of process `pid` for this database, if it is an opsh
    /// that left one and still runs.
    public static func record(of pid: Int32, database: String) -> Info? {
        guard let directory = directory(for: database, creating: false) else { return nil }
        let path = directory + "/\(pid)"
        var status = stat()
        guard lstat(path, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
              let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            fields[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        // Written by the process's own user, for this very process.
        var processStatus = stat()
        guard fields["pid"] == "\(pid)", stat("/proc/\(pid)", &processStatus) == 0,
              processStatus.st_uid == status.st_uid,
              let start = fields["start"], start == processStart(pid) else { return nil }
        let since = fields["since"].flatMap(Double.init).flatMap { $0 > 0 ? $0 : nil }
        return Info(pid: pid, user: fields["user"] ?? "?", script: fields["script"] ?? "?", writingSince: since)
    }

    /// "opsh (pid 123, user alice, script /srv/x.lua, in a write transaction since 12:00:03 UTC, 42 s)".
    public static func describe(_ info: Info, now: Double = Date().timeIntervalSince1970) -> String {
        var text = "opsh (pid \(info.pid), user \(info.user), \(info.script == "shell" ? "the shell" : "script \(info.script)")"
        if let since = info.writingSince {
            let formatter = DateFormatter()
            formatter.dateFormat = "HH:mm:ss"
            formatter.timeZone = TimeZone(identifier: "UTC")
            text += ", holding the write lock since \(formatter.string(from: Date(timeIntervalSince1970: since))) UTC"
                + " (\(ScriptSchedule.describe(seconds: max(0, (now - since).rounded()))))"
        }
        return text + ")"
    }
}

/// A value behind a lock, in a class: what a `static let` holds instead of
/// a `Mutex` (see ``LockOwner``'s `state`).
public final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    public func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
