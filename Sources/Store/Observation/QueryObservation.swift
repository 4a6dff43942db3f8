import Dispatch
import GRDB
import Synchronization

/// Keeps a value current: fetches it, then re-fetches after each change
/// of the tables it depends on, and calls back only when the value
/// actually changed.
///
/// Built on a table observation (``StorageClient/observeTables``, or any
/// other with its shape) and a read, so it knows no engine.
/// Bursts of changes coalesce: while a fetch runs, further notifications
/// mark the value dirty and cause one more fetch, not one per commit, so
/// an observation of a busy table keeps up.
public final class QueryObservation: Sendable {
    private struct State {
        var lastValue: StoreValue?
        var fetching = false
        var dirty = false
        var cancelled = false
        var tableObservation: StorageCancellable?
    }

    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "opsh.store.query-observation")
    private let read: @Sendable () throws -> StoreValue
    private let onChange: @Sendable (Result<StoreValue, any Error>) -> Void

    /// Starts observing: `observe` is a table observation
    /// (``StorageClient/observeTables``), `read` fetches the value in a
    /// read transaction of the same database.
    /// `onChange` receives the initial value first, then each different
    /// value, on an internal queue.
    public init(
        observe: @Sendable (_ tables: Set<String>, _ onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable,
        tables: Set<String>,
        read: @escaping @Sendable () throws -> StoreValue,
        onChange: @escaping @Sendable (Result<StoreValue, any Error>) -> Void
    ) throws {
        self.read = read
        self.onChange = onChange
        let observation = try observe(tables) { [weak self] in self?.changed() }
        state.withLock { $0.tableObservation = observation }
        changed()
    }

    /// Observes what `fetch` reads, through the GRDB client.
    public convenience init(
        client: StorageClient,
        tables: Set<String>,
        fetch: @escaping @Sendable (Database) throws -> StoreValue,
        onChange: @escaping @Sendable (Result<StoreValue, any Error>) -> Void
    ) throws {
        try self.init(observe: client.observeTables, tables: tables, read: { try client.read(fetch) }, onChange: onChange)
    }

    /// Observes a query key through the GRDB client.
    public convenience init(
        client: StorageClient, key: QueryKey,
        onChange: @escaping @Sendable (Result<StoreValue, any Error>) -> Void
    ) throws {
        try self.init(client: client, tables: key.observedTables, fetch: { try key.fetch($0) }, onChange: onChange)
    }

    /// Stops the observation: no callback starts after this returns.
    public func cancel() {
        let observation = state.withLock { state -> StorageCancellable? in
            state.cancelled = true
            defer { state.tableObservation = nil }
            return state.tableObservation
        }
        observation?.cancel()
    }

    deinit {
        state.withLock { $0.tableObservation }?.cancel()
    }

    private func changed() {
        let shouldStart = state.withLock { state -> Bool in
            if state.cancelled { return false }
            if state.fetching {
                state.dirty = true
                return false
            }
            state.fetching = true
            return true
        }
        if shouldStart {
            queue.async { [weak self] in self?.fetchLoop() }
        }
    }

    private func fetchLoop() {
        while true {
            state.withLock { $0.dirty = false }
            let result = Result { try read() }
            let deliver = state.withLock { state -> Bool in
                if state.cancelled { return false }
                if case .success(let value) = result {
                    if state.lastValue == value { return false }
                    state.lastValue = value
                }
                return true
            }
            if deliver { onChange(result) }
            let again = state.withLock { state -> Bool in
                if state.dirty && !state.cancelled { return true }
                state.fetching = false
                return false
            }
            if !again { return }
        }
    }
}
