import Foundation

/// How ``TelemetryCleanup``'s batches on SQLite share the write lock with
/// the writers of other processes (issue 27: the backend's writer waits
/// under 100 ms while the cleanup keeps ≥ 80 % of one `DELETE`'s
/// throughput).
///
/// A writer that finds the lock taken waits in SQLite's busy handler: it
/// sleeps and tries again 1, 3, 8, 18, 33, 53, 78, 103 … ms after its first
/// try (`sqliteDefaultBusyCallback`, the schedule ``LockWait`` keeps too).
/// Asleep it holds nothing, so nothing outside sees it wait: the lock must
/// be free at one of its tries. Hence:
/// - a batch holds the lock until just before the 53 ms try of a writer
///   that began waiting as the batch did (``lockAim``; a writer that
///   comes later tries later);
/// - then the lock stays free until another connection has committed (a
///   waiting writer got in), or at most ``longestPause(afterHolding:)``:
///   long enough for every writer that began waiting during the batch to
///   try once while it is free.
///
/// A fixed pause of half the batch's time (what the cleanup did before)
/// cost a third of the throughput, and still aliased with the schedule: a
/// writer's tries could all fall inside later batches (BENCHMARKS.md,
/// telemetry cleanup). Aiming each batch at the try of a writer that comes
/// as late after the batch's start as the last one let in did (a steady
/// writer's think time) missed that try on a loaded machine in a third of
/// the batches: that writer then waited about 90 ms, for no throughput.
enum BatchPacing {
    /// The try a batch ends before: 53 ms after a writer began waiting.
    static let aimedTry = Double(LockWait.delay(afterTries: 6).prior)

    /// Timer slack: a writer's sleep in its busy handler ends a little late
    /// on a busy machine.
    static let slack = 3.0

    /// How long one batch may hold the write lock, commit included, in
    /// milliseconds: 2 ms before that try, for a last step slower than the
    /// one before it (each step is about 2 ms).
    static let lockAim = aimedTry - 2

    /// Of ``lockAim``, left for the commit (it writes the pages still in
    /// the cache to the WAL): the batch's deletes stop this much sooner.
    static let commitAllowance = 2.0

    /// How long the lock must stay free after a batch held it `held` ms so
    /// that every writer that began waiting during the batch tries once
    /// while it is free: the longest sleep of the busy handler that can
    /// start before the batch's end (a writer that has waited `e` ms sleeps
    /// at most that long before its next try), plus ``slack``.
    static func longestPause(afterHolding held: Double) -> Double {
        var longest = 0
        var tries = 0
        while true {
            let (delay, prior) = LockWait.delay(afterTries: tries)
            if Double(prior) >= held { break }
            longest = max(longest, delay)
            tries += 1
        }
        return Double(longest) + slack
    }
}
