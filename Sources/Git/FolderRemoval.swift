import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Removes a workspace: a folder and everything in it, walked with
/// `openat`/`unlinkat` relative to descriptors of the folders themselves,
/// so that a link inside it (a checkout may hold `evil -> /home`) or in its
/// place is removed as a link and never followed, and a folder on another
/// file system (a mount inside it) is left alone (ARCHITECTURE.md,
/// "Build runners and the queue").
public enum FolderRemoval {
    /// Why a folder could not be removed.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var path: String
        public var reason: String
        public var description: String { "cannot remove \(path): \(reason)" }

        public init(path: String, reason: String) {
            self.path = path
            self.reason = reason
        }
    }

    /// Removes `path`: a folder with everything in it, or a file or a
    /// link (the link itself). Nothing happens when it does not exist.
    /// Only the last component of `path` may be a link (it is not
    /// followed); the folders above it are trusted.
    public static func remove(_ path: String) throws(Failure) {
        let url = URL(fileURLWithPath: path)
        let parentPath = url.deletingLastPathComponent().path
        let name = url.lastPathComponent
        guard !name.isEmpty, name != ".", name != ".." else { throw Failure(path: path, reason: "not a folder's name") }
        let parent = open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parent >= 0 else {
            if errno == ENOENT { return }
            throw Failure(path: path, reason: String(cString: strerror(errno)))
        }
        defer { close(parent) }
        var info = stat()
        guard fstat(parent, &info) == 0 else { throw Failure(path: path, reason: String(cString: strerror(errno))) }
        try remove(Array(name.utf8CString), in: parent, device: info.st_dev, path: path)
    }

    /// `name` as bytes: a name in a checkout need not be UTF-8.
    private static func remove(_ name: [CChar], in parent: Int32, device: dev_t, path: String) throws(Failure) {
        var info = stat()
        guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return }
            throw Failure(path: path, reason: String(cString: strerror(errno)))
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            guard unlinkat(parent, name, 0) == 0 || errno == ENOENT else {
                throw Failure(path: path, reason: String(cString: strerror(errno)))
            }
            return
        }
        guard info.st_dev == device else {
            throw Failure(path: path, reason: "it is on another file system (a mount): left alone")
        }
        let folder = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard folder >= 0 else {
            // Gone since it was looked at: another process removing the same
            // folder (two runners sweeping one database's workspaces) got there first.
            if errno == ENOENT { return }
            throw Failure(path: path, reason: String(cString: strerror(errno)))
        }
        // A build may have made a folder read-only: its entries could not be removed.
        if info.st_mode & S_IRWXU != S_IRWXU { fchmod(folder, (info.st_mode & 0o7777) | S_IRWXU) }
        guard let listing = fdopendir(folder) else {
            close(folder)
            throw Failure(path: path, reason: String(cString: strerror(errno)))
        }
        defer { closedir(listing) }
        var names: [[CChar]] = []
        while let entry = readdir(listing) {
            let entryName = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                bytes.prefix { $0 != 0 }.map { CChar(bitPattern: $0) } + [0]
            }
            if entryName != [46, 0] && entryName != [46, 46, 0] { names.append(entryName) }
        }
        for entryName in names {
            let shown = String(decoding: entryName.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
            try remove(entryName, in: dirfd(listing), device: device, path: path + "/" + shown)
        }
        guard unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT else {
            throw Failure(path: path, reason: String(cString: strerror(errno)))
        }
    }
}
