import CSQLBridge
import Foundation

/// A progress line for a batch run whose results go to a file or a pipe
/// (`opsh --json -e "return db.query(…)" > out.json`): past 2 s, the rows
/// the run has read so far (`reading  1,234,567 rows  412.3 k rows/s  0:03`)
/// on stderr when it is a terminal, erased when the run ends.
///
/// It counts the rows either engine's row path builds into Lua tables
/// (`opsh_rows_built`, one counter in C), from a thread of its own: the
/// rows are built by C code that calls nothing back. An export streamed from
/// the statement (``ReturnedRows``) builds no tables and draws its own line.
public final class RowsBuiltProgress: @unchecked Sendable {
    private let bar: ProgressBar
    private let condition = NSCondition()
    private var stopped = false
    private var thread: Thread?

    /// Starts watching; nothing is drawn when stderr is not a terminal.
    public init(label: String = "reading") {
        bar = ProgressBar(label: label, unit: "rows", delay: 2)
        guard bar.isVisible else { return }
        let start = opsh_rows_built()
        let thread = Thread { [self] in
            condition.lock()
            defer { condition.unlock() }
            while !stopped {
                let built = Int(opsh_rows_built() &- start)
                if built > 0 { bar.update(completed: built) }
                _ = condition.wait(until: Date().addingTimeInterval(0.2))
            }
            bar.clear()
        }
        thread.name = "opsh progress"
        self.thread = thread
        thread.start()
    }

    /// Stops and erases the line; returns once it is erased.
    public func stop() {
        guard let thread else { return }
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
        while !thread.isFinished { usleep(1000) }
        self.thread = nil
    }

    deinit { stop() }
}
