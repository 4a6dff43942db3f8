import Glibc
import Synchronization

/// libpq's password file (`~/.pgpass`, or `passfile=` / `PGPASSFILE`): the
/// password of a connection that has none, looked up for each host tried.
///
///     # hostname:port:database:username:password
///     db.example:6432:builds:alice:s3cret
///     *:*:*:runner:p\:w\\d          (`*` matches anything; `\:` and `\\` escape)
///
/// The first line whose four fields match wins. A host that is the default
/// socket folder matches `localhost`, as in libpq. A file that the group or
/// others may read (or that is not a plain file) is ignored, with a warning
/// on stderr saying why, as libpq does: a password file others can read is
/// not a secret.
enum PassFile {
    /// The password for this host, port, database and user from the file at
    /// `path`; nil when it has none (or is ignored).
    static func password(in path: String, host: PostgresURL.Host, database: String, user: String) -> String? {
        guard let file = SmallFile.read(path) else { return nil }
        guard file.isRegularFile else {
            warnOnce(path, "password file \"\(KeywordValueString.visible(path))\" is not a plain file, so it is ignored")
            return nil
        }
        if file.mode & (S_IRWXG | S_IRWXO) != 0 {
            warnOnce(path, "password file \"\(KeywordValueString.visible(path))\" has group or world access (mode 0\(String(file.mode & 0o777, radix: 8))), so it is ignored; permissions should be u=rw (0600) or less: chmod 600 it")
            return nil
        }
        return password(inLines: file.lines, host: matchingName(of: host), port: String(host.port), database: database, user: user)
    }

    /// The name a host's lines are written for: its name, else its address;
    /// the default socket folder (or none) is `localhost`.
    static func matchingName(of host: PostgresURL.Host) -> String {
        let name = host.name.isEmpty ? (host.address ?? "") : host.name
        if name.isEmpty || name == PostgresURL.defaultSocketDirectory { return "localhost" }
        return name
    }

    static func password(inLines lines: [ArraySlice<UInt8>], host: String, port: String, database: String, user: String) -> String? {
        let colon = UInt8(ascii: ":"), backslash = UInt8(ascii: "\\")
        for line in lines where !line.isEmpty && line.first != UInt8(ascii: "#") {
            var rest = line[...]
            var matches = true
            for token in [host, port, database, user] {
                guard let after = field(of: rest, matching: Array(token.utf8)) else { matches = false; break }
                rest = after
            }
            guard matches else { continue }
            var password: [UInt8] = []
            var index = rest.startIndex
            while index < rest.endIndex, rest[index] != colon {
                if rest[index] == backslash, index + 1 < rest.endIndex { index += 1 }
                password.append(rest[index])
                index += 1
            }
            return String(decoding: password, as: UTF8.self)
        }
        return nil
    }

    /// What follows the field at the start of `text` when it is `*` or
    /// (with its escapes undone) `token`; nil when it does not match.
    static func field(of text: ArraySlice<UInt8>, matching token: [UInt8]) -> ArraySlice<UInt8>? {
        let colon = UInt8(ascii: ":"), backslash = UInt8(ascii: "\\")
        if text.count >= 2, text[text.startIndex] == UInt8(ascii: "*"), text[text.startIndex + 1] == colon {
            return text[(text.startIndex + 2)...]
        }
        var index = text.startIndex
        var matched = 0
        while index < text.endIndex {
            var escaped = false
            if text[index] == backslash {
                index += 1
                escaped = true
                guard index < text.endIndex else { return nil }
            }
            if text[index] == colon, !escaped {
                return matched == token.count ? text[(index + 1)...] : nil
            }
            guard matched < token.count, text[index] == token[matched] else { return nil }
            matched += 1
            index += 1
        }
        return nil
    }

    private static let warned = Mutex<Set<String>>([])

    /// libpq warns at every connection; a runner opens several, so each
    /// file's warning is printed once per process.
    private static func warnOnce(_ path: String, _ message: String) {
        let first = warned.withLock { $0.insert(path).inserted }
        guard first else { return }
        let line = Array("WARNING: \(message)\n".utf8)
        _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }
}
