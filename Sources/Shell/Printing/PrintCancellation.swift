import Synchronization

/// Ctrl-C while the shell prints what a chunk returned. The chunk has
/// ended, so the signal cannot interrupt Lua; the printer checks this
/// between rows and stops (a 500,000-row result must not hold the shell).
public enum PrintCancellation {
    static let requested = Atomic<Bool>(false)

    /// Called by the signal watcher on SIGINT.
    public static func request() { requested.store(true, ordering: .relaxed) }
    static func reset() { requested.store(false, ordering: .relaxed) }
    static var isRequested: Bool { requested.load(ordering: .relaxed) }
}
