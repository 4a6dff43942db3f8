import Foundation
import GRDB

/// What `check` found.
public struct IntegrityReport: Sendable, Hashable {
    /// Lines of `PRAGMA integrity_check`, empty when it said "ok".
    public var integrityProblems: [String]
    /// Rows whose foreign key points at nothing.
    public var foreignKeyViolations: [ForeignKeyViolation]

    public var isOK: Bool { integrityProblems.isEmpty && foreignKeyViolations.isEmpty }

    public struct ForeignKeyViolation: Sendable, Hashable, CustomStringConvertible {
        public var table: String
        public var rowid: Int64?
        public var parent: String
        public var description: String {
            "\(table) row \(rowid.map(String.init) ?? "?") refers to a missing row of \(parent)"
        }
    }
}

/// Sizes and row counts.
public struct DatabaseStatistics: Sendable, Hashable {
    public var path: String?
    public var fileSize: Int64
    public var walSize: Int64
    public var pageSize: Int
    public var pageCount: Int
    public var freePageCount: Int
    /// Rows per table, in table-name order.
    public var rowCounts: [(table: String, rows: Int)]
    /// Applied migrations, oldest first.
    public var migrations: [String]
    /// Bytes on disk per table and index, where SQLite has the `dbstat`
    /// table (empty elsewhere).
    public var tableBytes: [String: Int64] = [:]

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.path == rhs.path && lhs.fileSize == rhs.fileSize && lhs.walSize == rhs.walSize
            && lhs.pageSize == rhs.pageSize && lhs.pageCount == rhs.pageCount
            && lhs.freePageCount == rhs.freePageCount && lhs.migrations == rhs.migrations
            && lhs.rowCounts.map(\.table) == rhs.rowCounts.map(\.table)
            && lhs.rowCounts.map(\.rows) == rhs.rowCounts.map(\.rows)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(path)
        hasher.combine(pageCount)
    }
}

/// Progress of a long operation: done out of total units (pages, rows).
public struct MaintenanceProgress: Sendable, Hashable {
    public var completed: Int
    public var total: Int
    public var fraction: Double { total == 0 ? 1 : Double(completed) / Double(total) }
}

/// How far a checkpoint goes (SQLite's modes, by their names).
public enum CheckpointMode: String, Sendable, CaseIterable {
    /// Never waits for anyone.
    case passive
    /// Waits for writers, then copies every frame.
    case full
    /// As `full`, then waits for readers so the next writer starts the WAL over.
    case restart
    /// As `restart`, then empties the `-wal` file.
    case truncate

    var grdbMode: Database.CheckpointMode {
        switch self {
        case .passive: .passive
        case .full: .full
        case .restart: .restart
        case .truncate: .truncate
        }
    }
}

extension Store {
    /// Copies the WAL's committed pages into the database file
    /// (`sqlite3_wal_checkpoint_v2`). `passive` never waits for anyone;
    /// `truncate` waits (the busy timeout) for readers and writers, then
    /// empties the `-wal` file.
    public func checkpoint(_ mode: CheckpointMode = .passive) throws -> (walFrames: Int, checkpointedFrames: Int) {
        try writer.writeWithoutTransaction { db in
            let result = try db.checkpoint(mode.grdbMode)
            return (result.walFrameCount, result.checkpointedFrameCount)
        }
    }

    /// Rebuilds the file to reclaim free pages. Needs the write lock for
    /// its whole duration.
    public func vacuum() throws {
        try writer.writeWithoutTransaction { db in try db.execute(sql: "VACUUM") }
    }

    /// Runs `integrity_check` and `foreign_key_check`.
    public func check() throws -> IntegrityReport {
        try writer.read { db in try Self.check(db) }
    }

    /// `check` on a connection the caller holds (inside a transaction, the
    /// transaction's own state is checked).
    static func check(_ db: Database) throws -> IntegrityReport {
        do {
            let integrity = try String.fetchAll(db, sql: "PRAGMA integrity_check")
            let violations = try Row.fetchAll(db, sql: "PRAGMA foreign_key_check").map { row in
                IntegrityReport.ForeignKeyViolation(table: row[0], rowid: row[1], parent: row[2])
            }
            return IntegrityReport(integrityProblems: integrity == ["ok"] ? [] : integrity,
                                   foreignKeyViolations: violations)
        }
    }

    /// Row counts, file and WAL sizes, pages.
    public func statistics() throws -> DatabaseStatistics {
        try writer.read { db in try statistics(db) }
    }

    /// `statistics` on a connection the caller holds.
    func statistics(_ db: Database) throws -> DatabaseStatistics {
        do {
            let tables = try String.fetchAll(db, sql: """
                SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name
                """)
            var counts: [(String, Int)] = []
            for table in tables {
                counts.append((table, try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(table))") ?? 0))
            }
            let migrations = try db.tableExists("grdb_migrations")
                ? try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid") : []
            return DatabaseStatistics(
                path: path,
                fileSize: path.map(Self.fileSize) ?? 0,
                walSize: path.map { Self.fileSize($0 + "-wal") } ?? 0,
                pageSize: try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 0,
                pageCount: try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0,
                freePageCount: try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0,
                rowCounts: counts,
                migrations: migrations,
                tableBytes: Self.tableBytes(db))
        }
    }

    /// Bytes per table from `dbstat`, or nothing where it is not compiled in.
    private static func tableBytes(_ db: Database) -> [String: Int64] {
        var bytes: [String: Int64] = [:]
        if let rows = try? Row.fetchAll(db, sql: "SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name") {
            for row in rows { bytes[row["name"]] = row["bytes"] }
        }
        return bytes
    }

    static func fileSize(_ path: String) -> Int64 {
        var status = stat()
        return stat(path, &status) == 0 ? Int64(status.st_size) : 0
    }
}
