import Foundation
import GRDB

/// SQLite's side of ``RunnerRegistry``: the machine's clock, one short
/// write transaction per statement, through the store's writer (which waits
/// out the busy timeout, then fails: a heartbeat that cannot be written).
extension SQLiteBuildStore {
    public func registerRunner(_ runner: RunnerRegistration) throws -> Bool {
        let now = Date().timeIntervalSince1970
        return try store.client.write { db in
            guard try Self.registryExists(db) else { return false }
            try db.execute(sql: RunnerRegistry.pruneEnded, arguments: [now - RunnerRegistry.keptAfterEnd])
            try Self.insert(db, runner, now: now)
            return true
        }
    }

    public func beatRunner(_ runner: RunnerRegistration, registered: Bool) throws {
        let now = Date().timeIntervalSince1970
        try store.client.write { db in
            guard registered else {
                try db.execute(sql: "UPDATE builds SET id = id WHERE 0")  // takes the write lock, changes nothing
                return
            }
            try db.execute(sql: "UPDATE \(RunnerRegistry.table) SET heartbeatAt = ?, stoppedAt = NULL WHERE id = ?",
                           arguments: [now, runner.id])
            if db.changesCount == 0 { try Self.insert(db, runner, now: now) }
        }
    }

    public func runnerStopped(_ id: String) throws {
        let now = Date().timeIntervalSince1970
        try store.client.write { db in
            guard try Self.registryExists(db) else { return }
            try db.execute(sql: "UPDATE \(RunnerRegistry.table) SET stoppedAt = ? WHERE id = ?", arguments: [now, id])
        }
    }

    private static func registryExists(_ db: Database) throws -> Bool {
        try db.tableExists(RunnerRegistry.table)
    }

    private static func insert(_ db: Database, _ runner: RunnerRegistration, now: Double) throws {
        let values = runner.values(now: now).map(\.databaseValue)
        try db.execute(sql: "INSERT INTO \(RunnerRegistry.table) (\(RunnerRegistry.insertColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       arguments: StatementArguments(values))
    }
}
