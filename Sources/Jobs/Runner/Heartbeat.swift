import Foundation

/// Calls `beat` every `interval` seconds on a thread of its own until
/// ``stop()``: the job manager's heartbeat for the builds it holds.
/// A thread rather than Dispatch, so that the beat comes on time even
/// when Dispatch's workers are all busy.
final class Heartbeat: @unchecked Sendable {
    private let condition = NSCondition()
    private var stopped = false

    init(interval: TimeInterval, beat: @escaping @Sendable () -> Void) {
        let thread = Thread { [self] in
            while true {
                let stop = condition.withLock { () -> Bool in
                    let deadline = Date().addingTimeInterval(interval)
                    while !stopped, condition.wait(until: deadline) {}
                    return stopped
                }
                if stop { return }
                beat()
            }
        }
        thread.name = "opsh.heartbeat"
        thread.start()
    }

    func stop() {
        condition.withLock {
            stopped = true
            condition.broadcast()
        }
    }
}
