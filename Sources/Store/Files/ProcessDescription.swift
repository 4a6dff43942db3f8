import Foundation

/// What /proc says of a process, for messages and for telling a live
/// owner from a gone one: "pid 123 (opsh run /srv/nightly.lua), since
/// 2026-05-04 02:00:03 UTC", and its start time, which with its pid tells
/// it from a later process given the same pid.
enum ProcessDescription {
    static func describe(_ pid: Int32) -> String {
        var text = "pid \(pid)"
        if let arguments = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !arguments.isEmpty {
            let words = arguments.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            let command = ([(words.first.map { ($0 as NSString).lastPathComponent } ?? "")] + words.dropFirst()).joined(separator: " ")
            text += " (\(command.count > 200 ? String(command.prefix(200)) + "…" : command))"
        }
        if let started = startTime(pid) {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "UTC")
            formatter.dateFormat = "yyyy-MM-dd HH:mm:ss 'UTC'"
            text += ", since \(formatter.string(from: started))"
        }
        return text
    }

    /// When the process started: its start time in clock ticks after boot
    /// (/proc/PID/stat, field 22) after the boot time (/proc/stat's btime).
    static func startTime(_ pid: Int32) -> Date? {
        guard let ticks = startTicks(pid),
              let system = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = system.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
              let boot = Double(line.dropFirst("btime ".count)) else { return nil }
        return Date(timeIntervalSince1970: boot + Double(ticks) / Double(sysconf(Int32(_SC_CLK_TCK))))
    }

    /// The process's start time in clock ticks after boot: with its pid,
    /// what tells it from a later process given the same pid; nil when
    /// there is no such process.
    static func startTicks(_ pid: Int32) -> UInt64? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        // After the command's closing parenthesis: field 3 onwards.
        let fields = text[text.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? UInt64(fields[19]) : nil
    }

    /// This boot of the machine (/proc/sys/kernel/random/boot_id): start
    /// times count from it.
    static var bootID: String {
        (try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
    }
}
