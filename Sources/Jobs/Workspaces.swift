import Foundation
import Git
import Store
import TextCodec
#if canImport(Glibc)
import Glibc
#endif

/// The workspaces folder: where each run of a build checks out, which
/// folders opsh made there, and removing them (ARCHITECTURE.md,
/// "Build runners and the queue").
///
/// - **A folder's name comes from the build's id, never the id itself as
///   a path.** An id of letters, digits, `-` and `_` (a UUID, what opsh
///   and the backend make) is its own name; any other id (`../victim`,
///   `..`, `/tmp`) gets `_` and the first 32 hex digits of its SHA-256, a
///   name no plain id has. A later attempt of a build checks out into
///   `NAME.attempt-2`, `-3` … (its earlier run's processes may still write
///   in the first).
/// - **opsh records what it made.** Before a checkout, a record in
///   `.opsh-workspaces/NAME` says which database, build and scheme the
///   folder is for; retention (``JobManager/sweepWorkspaces()``) looks
///   only at recorded folders of its own database, so folders others put
///   there, and other databases' builds sharing the folder, are left alone.
/// - **Removal never follows a link** (``FolderRemoval``): a link in a
///   workspace's place, or inside it, is not a way out of the folder.
public struct Workspaces: Sendable {
    /// The workspaces folder, absolute.
    public let root: String
    /// The database the records say a folder is for (a path, or a URL
    /// without its password).
    public let database: String

    public init(root: String, database: String) {
        self.root = URL(fileURLWithPath: root).standardizedFileURL.path
        self.database = database
    }

    /// What a record says of a folder opsh made.
    public struct Owner: Sendable, Hashable {
        public var database: String
        public var build: String
        public var scheme: String
        /// The folder's name in the workspaces folder.
        public var folder: String

        /// The record's text: a JSON object of the four.
        var document: JSON {
            .object([("database", .string(database)), ("build", .string(build)), ("scheme", .string(scheme)),
                     ("folder", .string(folder))])
        }

        /// A record's owner; nil unless it has the four as strings (its
        /// members in any order, as earlier versions wrote them too).
        init?(_ document: JSON) {
            guard let database = document["database"]?.stringValue, let build = document["build"]?.stringValue,
                  let scheme = document["scheme"]?.stringValue, let folder = document["folder"]?.stringValue
            else { return nil }
            self.init(database: database, build: build, scheme: scheme, folder: folder)
        }

        init(database: String, build: String, scheme: String, folder: String) {
            self.database = database
            self.build = build
            self.scheme = scheme
            self.folder = folder
        }
    }

    private var recordsFolder: String { root + "/.opsh-workspaces" }

    // MARK: Names

    /// The folder name of build `id`'s first run.
    public static func folderName(for id: String) -> String {
        let plain = !id.isEmpty && id.utf8.count <= 100 && id.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2D || byte == 0x5F
        } && id.first != "-" && id.first != "_"
        return plain ? id : "_" + String(Digest.sha256Hex(Array(id.utf8)).prefix(32))
    }

    /// Where build `id`'s first run checks out.
    public func path(for id: String) -> String {
        root + "/" + Self.folderName(for: id)
    }

    /// Where a run of build `id` checks out: ``path(for:)`` for its first
    /// run; for a later one the first of `NAME.attempt-2`, `-3` … that does
    /// not exist (not even as a dangling link).
    public func freshPath(for id: String) -> String {
        let first = path(for: id)
        guard Self.exists(first) else { return first }
        var attempt = 2
        while Self.exists("\(first).attempt-\(attempt)") { attempt += 1 }
        return "\(first).attempt-\(attempt)"
    }

    /// The folders of every run of build `id` that exist, first run first.
    public func paths(of id: String) -> [String] {
        let name = Self.folderName(for: id)
        let prefix = name + ".attempt-"
        let later = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .filter { $0.hasPrefix(prefix) && Int($0.dropFirst(prefix.count)) != nil }
            .sorted { Int($0.dropFirst(prefix.count))! < Int($1.dropFirst(prefix.count))! }
            .map { root + "/" + $0 }
        let first = root + "/" + name
        return (Self.exists(first) ? [first] : []) + later
    }

    /// Whether anything (a link too, dangling or not) has that name.
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    // MARK: Records

    /// Records, before the checkout, that opsh makes `path` for `build` of
    /// `scheme`; written whole (a temporary file renamed into place).
    public func recordOwner(of path: String, build: String, scheme: String) throws {
        try FileManager.default.createDirectory(atPath: recordsFolder, withIntermediateDirectories: true)
        let folder = (path as NSString).lastPathComponent
        let owner = Owner(database: database, build: build, scheme: scheme, folder: folder)
        let data = Data(owner.document.compactText().utf8)
        let temporary = recordsFolder + "/.\(folder).\(getpid()).tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: data) else {
            throw FolderRemoval.Failure(path: temporary, reason: "cannot write it")
        }
        guard rename(temporary, recordsFolder + "/" + folder) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw FolderRemoval.Failure(path: recordsFolder + "/" + folder, reason: reason)
        }
    }

    /// The folders opsh made here for this database, as recorded.
    public func owned() -> [Owner] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: recordsFolder)) ?? []
        return names.filter { !$0.hasPrefix(".") }.compactMap { name in
            guard let data = FileManager.default.contents(atPath: recordsFolder + "/" + name),
                  let document = try? JSONParser.parse(Array(data)), let owner = Owner(document),
                  owner.folder == name, owner.database == database else { return nil }
            return owner
        }
    }

    /// Removes a workspace and its record. Only a real folder: a link or
    /// a file in a workspace's place is not opsh's, and is left alone
    /// (saying so); nothing inside the folder is followed either.
    public func remove(_ path: String) throws {
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFDIR {
            throw FolderRemoval.Failure(path: path, reason: "it is not a folder opsh made (a link or a file): left alone")
        }
        try FolderRemoval.remove(path)
        unlink(recordsFolder + "/" + (path as NSString).lastPathComponent)
    }

    /// Removes the folder named in `owner` and its record.
    func remove(_ owner: Owner) throws {
        try remove(root + "/" + owner.folder)
    }
}
