import Foundation
import LuaRuntime
import Store

/// What `watch` and `opsh.wait` need of a session, whatever its engine:
/// its Lua runtime and event queue, how it learns the tables a query
/// reads, and how it hears other processes' commits (SQLite: `PRAGMA
/// data_version` and in-process observers; PostgreSQL: LISTEN/NOTIFY).
protocol WatchHost: AnyObject {
    var runtime: LuaRuntime { get }
    var subscriptions: Subscriptions { get }
    /// Set while a transaction is open: waiting then would keep it open
    /// (and, on SQLite, every other writer locked out). Its name, for the
    /// message.
    var openTransactionForWait: String? { get }
    /// Ends the read snapshot a burst of reads shares, before waiting and
    /// before fetching again.
    func releaseReadSnapshot()
    /// The tables `sql` reads with these values, found by the engine (a
    /// statement that writes is refused).
    func tablesRead(by sql: String, arguments: QueryArguments) throws -> Set<String>
    /// Calls `onChange` (on another thread) after each commit that changed
    /// one of `tables`, whoever made it.
    func observe(_ tables: Set<String>, onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable
}

extension OpshSession: WatchHost {
    var openTransactionForWait: String? {
        database.isInTransaction ? database.openTransactionName : nil
    }

    func tablesRead(by sql: String, arguments: QueryArguments) throws -> Set<String> {
        do {
            return try database.tablesRead(by: sql, arguments: arguments)
        } catch let StoreError.refused(reason) {
            throw LuaCallError.message(reason)
        }
    }

    func observe(_ tables: Set<String>, onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable {
        try database.observe(tables, onChange: onChange)
    }
}
