import Foundation
import LuaRuntime

/// `--timeout`: interrupts the running chunk with `.timeout` when the
/// time is up. `expired` is called when the time is up but no chunk runs.
public final class Deadline: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelled = false

    public init(seconds: Double, runtime: LuaRuntime, expired: @escaping @Sendable () -> Void) {
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
            guard !lock.withLock({ cancelled }) else { return }
            if !runtime.interrupt(.timeout) { expired() }
        }
    }

    public func cancel() { lock.withLock { cancelled = true } }
}
