import Foundation

/// Every audit row also goes to syslog: one line, facility authpriv,
/// severity notice, where no script reaches it (journald or the syslog
/// daemon keep it apart from the database). The line holds the row's id
/// and hash and the one before it, so the journal witnesses what the
/// database's chain cannot show by itself: rows removed from its end, a
/// row forged with a computed hash (``AuditChain``).
///
/// Sent to `/dev/log` (`OPSH_SYSLOG_SOCKET` names another socket) as
/// `syslog(3)` does, but by opsh itself, so that nothing else of the
/// process's logging changes; where no syslog listens, nothing is sent and
/// nothing is said (the row is in the database all the same).
public enum AuditSyslog {
    /// LOG_AUTHPRIV (10) × 8 + LOG_NOTICE (5).
    static let priority = 85

    /// A row that landed in the trail.
    public static func written(_ entry: AuditEntry, stamp: AuditRowStamp, database: String) {
        var head = "audit row \(stamp.id)"
        if let hash = stamp.hash { head += " hash \(hash) previous \(stamp.previousHash ?? "-")" }
        send(head + ": " + describe(entry, database: database))
    }

    /// A row kept in the spool, not yet in the trail.
    public static func spooled(_ entry: AuditEntry, database: String, reason: String) {
        send("audit row spooled (not yet in the trail: \(quoted(reason))): " + describe(entry, database: database))
    }

    /// `audit.prune` cut the chain after `stamp`'s row.
    public static func pruned(deleted: Int, cut: AuditRowStamp?, database: String) {
        var text = "audit prune: \(deleted) row\(deleted == 1 ? "" : "s") removed"
        if let cut { text += "; the chain now starts after row \(cut.id) hash \(cut.hash ?? "-")" }
        send(text + "; user \(quoted(AuditTrail.currentUser)) database \(quoted(database))")
    }

    static func describe(_ entry: AuditEntry, database: String) -> String {
        var text = "user \(quoted(entry.user)) host \(quoted(entry.host)) pid \(entry.pid) mode \(entry.mode.rawValue)"
        text += " status \(entry.status)\(entry.dryRun ? " dry-run" : "")"
        if let script = entry.script { text += " script \(quoted(script))" }
        if let digest = entry.scriptSHA256 { text += " sha256 \(digest)" }
        if let reason = entry.reason { text += " reason \(quoted(reason))" }
        text += " changes \(quoted(AuditTrail.changesJSON(entry.changes))) database \(quoted(database))"
        return text
    }

    /// `text` in double quotes, on one line: control characters, quotes
    /// and backslashes escaped (`\n`, `\x1b`), at most 300 characters.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for (index, scalar) in text.unicodeScalars.enumerated() {
            if index == 300 { out += "…"; break }
            switch scalar {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                if scalar.value < 0x20 || (scalar.value >= 0x7f && scalar.value < 0xa0) {
                    out += "\\x" + String(format: "%02x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    /// The socket syslog listens on.
    static var socketPath: String {
        let named = EnvironmentVariables.process["OPSH_SYSLOG_SOCKET"] ?? ""
        return named.isEmpty ? "/dev/log" : named
    }

    /// Sends one message as `<PRI>Mmm dd hh:mm:ss opsh[pid]: text`.
    static func send(_ text: String) {
        var now = time(nil)
        var parts = tm()
        localtime_r(&now, &parts)
        var stamp = [CChar](repeating: 0, count: 32)
        _ = stamp.withUnsafeMutableBufferPointer { strftime($0.baseAddress, $0.count, "%b %e %H:%M:%S", &parts) }
        let line = "<\(priority)>\(String(cString: stamp)) opsh[\(getpid())]: \(text)"
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socketPath.utf8)
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.enumerated() { buffer[index] = byte }
        }
        for type in [Int32(SOCK_DGRAM.rawValue), Int32(SOCK_STREAM.rawValue)] {
            let descriptor = socket(AF_UNIX, type | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard descriptor >= 0 else { return }
            defer { close(descriptor) }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            if connected != 0 {
                if errno == EPROTOTYPE { continue }  // a stream socket: try that
                return
            }
            // A stream listener reads messages ended by a NUL.
            let bytes = Array(line.utf8) + (type == Int32(SOCK_STREAM.rawValue) ? [0] : [])
            _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            return
        }
    }
}
