import Foundation
import LuaRuntime

/// `--timeout`: interrupts the running chunk with `.timeout` when the
/// time is up. `expired` is called when the time is up but no chunk runs.
public final class Deadline: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelled = false

    /// - parameter grace: how long the interrupted chunk has to stop before
    ///   `expired` is called anyway. Lua runs no hook inside a `__gc`
    ///   finalizer, nor in a message handler called for an error a hook
    ///   raised, so `setmetatable({}, {__gc = function() while true do end end})`
    ///   or `xpcall(f, function() return f() end)` ignored the interrupt and
    ///   ran past --timeout for ever.
    public init(seconds: Double, runtime: LuaRuntime, grace: Double = 3, expired: @escaping @Sendable () -> Void) {
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
            guard !lock.withLock({ cancelled }) else { return }
            if !runtime.interrupt(.timeout) {
                expired()
                return
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + grace) { [self] in
                if !lock.withLock({ cancelled }) { expired() }
            }
        }
    }

    public func cancel() { lock.withLock { cancelled = true } }
}
