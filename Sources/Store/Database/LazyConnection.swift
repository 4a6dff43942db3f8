import GRDB
import Synchronization

/// A store's GRDB writer, opened on first use.
///
/// Opening means a read-only look at the applied migrations, a pool with
/// WAL set up and the migrations: a few milliseconds and three schema
/// parses, which a script that never touches the database should not pay.
/// A failed open is not remembered: the next use tries again (a lock held
/// past the busy timeout may be gone by then).
final class LazyConnection: Sendable {
    /// What opening produced.
    struct Opened {
        var writer: any DatabaseWriter
        /// The file SQLite opened (to tell later whether the path still
        /// names it); nil in memory.
        var file: FileIdentity?
    }

    private struct State {
        var writer: (any DatabaseWriter)?
        var file: FileIdentity?
        var pending: [@Sendable (any DatabaseWriter) -> Void] = []
        var lastFailure: String?
    }

    private let open: @Sendable () throws -> Opened
    private let state = Mutex(State())

    init(_ open: @escaping @Sendable () throws -> Opened) {
        self.open = open
    }

    /// The writer, opening it first if needed (one thread opens; the others
    /// wait for it).
    func writer() throws -> any DatabaseWriter {
        try state.withLock { state in
            if let writer = state.writer { return writer }
            do {
                let opened = try open()
                let writer = opened.writer
                // Before anyone else can use it: settings every connection
                // must carry.
                for body in state.pending { body(writer) }
                state.pending = []
                state.writer = writer
                state.file = opened.file
                state.lastFailure = nil
                return writer
            } catch {
                state.lastFailure = "\(error)"
                throw error
            }
        }
    }

    var isConnected: Bool { state.withLock { $0.writer != nil } }

    /// The file opened, once connected.
    var openedFile: FileIdentity? { state.withLock { $0.file } }

    /// Why the last attempt to open failed, until one succeeds.
    var lastFailure: String? { state.withLock { $0.lastFailure } }

    /// Runs `body` on the writer if it is open.
    func ifConnected(_ body: (any DatabaseWriter) -> Void) {
        if let writer = state.withLock({ $0.writer }) { body(writer) }
    }

    /// Runs `body` now if open, else once it opens.
    func whenConnected(_ body: @escaping @Sendable (any DatabaseWriter) -> Void) {
        let writer = state.withLock { state -> (any DatabaseWriter)? in
            if state.writer == nil { state.pending.append(body) }
            return state.writer
        }
        if let writer { body(writer) }
    }
}
