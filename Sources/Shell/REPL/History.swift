@preconcurrency import CReadline
import Foundation

/// The shell's history: readline's list in memory, and a file in the XDG
/// state folder (mode 0600: lines may hold secrets) appended to after each
/// entry, so several shells at once lose nothing.
///
/// One entry per line; a multi-line chunk is one entry, its newlines
/// written as `\n` (and backslashes as `\\`). Consecutive duplicates are
/// kept once.
final class History {
    static let limit = 1000

    let path: String?
    private let console: Console
    private var last: String?

    init(path: String?, console: Console) {
        self.path = path
        self.console = console
        using_history()
        stifle_history(Int32(Self.limit))
        if let path { load(path) }
    }

    private func load(_ path: String) {
        guard FileManager.default.fileExists(atPath: path) else { return }
        guard let data = FileManager.default.contents(atPath: path) else {
            console.warning("cannot read the history file \(path); history is not saved this session")
            return
        }
        _ = chmod(path, 0o600)
        let entries = String(decoding: data, as: UTF8.self).split(separator: "\n").map { Self.decode(String($0)) }
        for entry in entries.suffix(Self.limit) where entry != last {
            add_history(entry)
            last = entry
        }
        if entries.count > 2 * Self.limit { rewrite(path, entries: Array(entries.suffix(Self.limit))) }
    }

    /// Adds an entry (in memory and to the file).
    func add(_ entry: String) {
        let trimmed = entry.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, trimmed != last else { return }
        last = trimmed
        add_history(trimmed)
        guard let path else { return }
        append(path, line: Self.encode(trimmed) + "\n")
    }

    private func append(_ path: String, line: String) {
        let folder = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            console.warning("cannot write the history file \(path): \(String(cString: strerror(errno)))")
            return
        }
        defer { close(descriptor) }
        _ = fchmod(descriptor, 0o600)
        Terminal.write(line, to: descriptor)
    }

    private func rewrite(_ path: String, entries: [String]) {
        let temporary = path + ".\(getpid()).tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return }
        Terminal.write(entries.map { Self.encode($0) + "\n" }.joined(), to: descriptor)
        close(descriptor)
        _ = rename(temporary, path)
    }

    static func encode(_ entry: String) -> String {
        entry.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
    }

    static func decode(_ line: String) -> String {
        var result = ""
        var escaped = false
        for character in line {
            if escaped {
                result.append(character == "n" ? "\n" : character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else {
                result.append(character)
            }
        }
        return result
    }
}
