import Foundation
import Synchronization

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

/// Waits until a script has written a line to `path` (the file exists and
/// ends with a newline, as `echo` writes it) and returns its trimmed
/// content; what is there, or nil when nothing is, after `timeout`.
public func waitForFile(_ path: String, timeout: TimeInterval = 30) -> String? {
    var content: String?
    _ = waitUntil(timeout) {
        content = try? String(contentsOfFile: path, encoding: .utf8)
        return content?.hasSuffix("\n") == true
    }
    return content?.trimmingCharacters(in: .whitespacesAndNewlines)
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

/// A moment another thread waits for: the test's code calls ``arrive()``
/// where it has got to (a host function a chunk calls right before the
/// blocking call a test interrupts), the other thread ``wait(timeout:)``s
/// for it by polling instead of sleeping a fixed time.
public final class Arrival: Sendable {
    private let arrived = Atomic<Bool>(false)

    public init() {}

    public func arrive() { arrived.store(true, ordering: .releasing) }

    /// Whether it arrived within `timeout` seconds.
    @discardableResult
    public func wait(timeout: Double = 60) -> Bool {
        waitUntil(timeout) { arrived.load(ordering: .acquiring) }
    }
}
