import Foundation

/// Polls `condition` every 20 ms until it holds (true) or `seconds` pass
/// (false).
public func waitUntil(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(20_000)
    }
    return try condition()
}

/// `waitUntil`, the other way round (the jobs tests' name).
public func eventually(timeout: TimeInterval = 5, _ condition: () throws -> Bool) rethrows -> Bool {
    try waitUntil(timeout, condition)
}

/// Waits until `path` exists (a script wrote it) and returns its trimmed
/// content, or nil after `timeout`.
public func waitForFile(_ path: String, timeout: TimeInterval = 5) -> String? {
    guard waitUntil(timeout, { FileManager.default.fileExists(atPath: path) }) else { return nil }
    usleep(20_000)  // let the writer finish the line
    return (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Whether process `pid` has `path` open (one of its /proc/PID/fd links
/// names it): a child that has reached its database, where a test waits
/// for that instead of sleeping.
public func processHasOpen(_ pid: pid_t, _ path: String) -> Bool {
    let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    let folder = "/proc/\(pid)/fd"
    let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
    return descriptors.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: folder + "/" + $0)) == target }
}
