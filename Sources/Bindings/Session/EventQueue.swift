import Foundation
import Synchronization

/// Events posted from other threads (a watched value changed, a job
/// printed a line) for the Lua thread to handle (ARCHITECTURE.md, decision 2).
///
/// Posting writes a byte to a pipe, so a loop waiting in `poll(2)` on
/// stdin (the shell) or on ``wakeDescriptor`` alone (`opsh.wait`) wakes up.
public final class EventQueue: Sendable {
    private let pending = Mutex<[(Int, Any & Sendable)]>([])
    private let pipeEnds: (read: Int32, write: Int32)

    public init() {
        var ends: [Int32] = [0, 0]
        pipe(&ends)
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        pipeEnds = (ends[0], ends[1])
    }

    deinit {
        close(pipeEnds.read)
        close(pipeEnds.write)
    }

    /// Readable while events wait.
    public var wakeDescriptor: Int32 { pipeEnds.read }

    /// Queues `value` for subscription `id`. Any thread.
    public func post(_ id: Int, _ value: any Sendable) {
        pending.withLock { $0.append((id, value)) }
        var byte: UInt8 = 1
        _ = write(pipeEnds.write, &byte, 1)
    }

    /// Takes every queued event, oldest first.
    public func drain() -> [(Int, Any & Sendable)] {
        var buffer = [UInt8](repeating: 0, count: 256)
        while read(pipeEnds.read, &buffer, buffer.count) > 0 {}
        return pending.withLock { events in
            defer { events.removeAll() }
            return events
        }
    }

    public var isEmpty: Bool { pending.withLock { $0.isEmpty } }

    /// Waits until an event is queued or `timeout` passes (nil: forever),
    /// waking every `slice` seconds so the caller can check interrupts.
    /// Returns whether events wait.
    public func wait(timeout: Double?, slice: Double = 0.05, shouldStop: () -> Bool) -> Bool {
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        while isEmpty {
            if shouldStop() { return false }
            var remaining = slice
            if let deadline {
                remaining = min(slice, deadline.timeIntervalSinceNow)
                if remaining <= 0 { return false }
            }
            var descriptor = pollfd(fd: pipeEnds.read, events: Int16(POLLIN), revents: 0)
            _ = poll(&descriptor, 1, Int32(max(1, remaining * 1000)))
        }
        return true
    }
}
