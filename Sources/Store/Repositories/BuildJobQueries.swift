import Foundation
import GRDB
import GRDBSQLite
import TextCodec

// The queries of the job runner (Sources/Jobs): conditional status changes
// that stay correct when several opsh processes share the database, the
// batched log insert, and "log lines after cursor X" for followers. Who
// holds a build (claims, heartbeats, taking back) is BuildQueueQueries.

/// One line of build output and its cursor: pass the cursor of the last
/// line seen to ``BuildLogRepository/lines(_:build:after:limit:includeDebug:)``
/// to get the lines written after it.
public struct BuildLogLine: Sendable, Hashable {
    /// The line's rowid.
    public var cursor: Int64
    public var record: BuildLogRecord

    public init(cursor: Int64, record: BuildLogRecord) {
        self.cursor = cursor
        self.record = record
    }
}

/// A line for ``BuildLogRepository/appendBatch(_:build:_:)``.
public struct NewBuildLogLine: Sendable {
    public var id: String
    public var level: BuildLogLevel
    public var category: String
    public var content: String
    /// Seconds since 1970.
    public var createdAt: Double

    public init(id: String, level: BuildLogLevel, category: String, content: String, createdAt: Double) {
        self.id = id
        self.level = level
        self.category = category
        self.content = content
        self.createdAt = createdAt
    }
}

extension BuildLogRepository {
    /// Lines one INSERT appends (``appendBatch(_:build:_:)``).
    static let linesPerInsert = 64

    /// Appends lines of one build, bound with SQLite's C API: by INSERTs of
    /// ``linesPerInsert`` rows, the rest one by one (two statements kept).
    /// A statement's execution costs its start and end (cursors, and the
    /// ephemeral table SQLite builds for `level`'s CHECK `IN (…)` list), paid
    /// per INSERT, not per line: the write lock is held that much less.
    /// The rows go in in the order of `lines` (their rowids ascending).
    /// Run it in the caller's (short) transaction.
    func appendBatch(_ db: Database, build buildId: String, _ lines: [NewBuildLogLine]) throws {
        guard !lines.isEmpty else { return }
        let row = "(?, ?, ?, ?, ?, ?)"
        func statement(rows: Int) throws -> Statement {
            try db.cachedStatement(sql: """
                INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES \(repeatElement(row, count: rows).joined(separator: ", "))
                ON CONFLICT (id) DO NOTHING
                """)
        }
        var start = lines.startIndex
        while start < lines.endIndex {
            let rows = lines.endIndex - start >= Self.linesPerInsert ? Self.linesPerInsert : 1
            let handle = try statement(rows: rows).sqliteStatement
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
            defer {
                sqlite3_reset(handle)
                sqlite3_clear_bindings(handle)
            }
            for (offset, line) in lines[start..<(start + rows)].enumerated() {
                let first = Int32(offset * 6)
                bindText(handle, first + 1, line.id)
                bindText(handle, first + 2, buildId)
                bindText(handle, first + 3, line.level.rawValue)
                bindText(handle, first + 4, line.category)
                bindText(handle, first + 5, line.content)
                sqlite3_bind_double(handle, first + 6, line.createdAt)
            }
            let code = sqlite3_step(handle)
            guard code == SQLITE_DONE else {
                throw DatabaseError(resultCode: ResultCode(rawValue: code),
                                    message: String(cString: sqlite3_errmsg(db.sqliteConnection)), sql: String(cString: sqlite3_sql(handle)))
            }
            start += rows
        }
        // The raw steps bypass GRDB's change tracking: tell observers (the
        // audit's counts come from the connection's preupdate hook).
        try db.notifyChanges(in: Table(BuildLogRecord.databaseTableName))
    }

    /// The lines of a build written after the line `cursor` (0: from the
    /// start), oldest first, at most `limit`.
    ///
    /// Lines are ordered by (createdAt, rowid), which the job runner keeps
    /// in insertion order, so the `buildLogs(buildId, createdAt)` index
    /// serves the query as a range: cheap however long the log.
    func lines(_ db: Database, build buildId: String, after cursor: Int64 = 0, limit: Int = 1000,
                      includeDebug: Bool = true) throws -> [BuildLogLine] {
        var from = -Double.infinity
        if cursor > 0 {
            guard let date = try Double.fetchOne(db, sql: "SELECT createdAt FROM buildLogs WHERE rowid = ?",
                                                 arguments: [cursor]) else { return [] }
            from = date
        }
        let rows = try Row.fetchAll(db, sql: """
            SELECT rowid AS cursor, * FROM buildLogs
            WHERE buildId = ?1 AND createdAt >= ?2 AND (createdAt > ?2 OR rowid > ?3) AND (?4 OR level <> 'debug')
            ORDER BY createdAt, rowid LIMIT ?5
            """, arguments: [buildId, from, cursor, includeDebug, max(0, limit)])
        return try rows.map { BuildLogLine(cursor: $0["cursor"], record: try BuildLogRecord(row: $0)) }
    }

    /// The last `count` lines of a build with their cursors, oldest first.
    func lastLines(_ db: Database, build buildId: String, count: Int, includeDebug: Bool = true) throws -> [BuildLogLine] {
        let rows = try Row.fetchAll(db, sql: """
            SELECT * FROM (SELECT rowid AS cursor, * FROM buildLogs WHERE buildId = ? AND (? OR level <> 'debug')
                           ORDER BY createdAt DESC, rowid DESC LIMIT ?)
            ORDER BY createdAt, cursor
            """, arguments: [buildId, includeDebug, max(0, count)])
        return try rows.map { BuildLogLine(cursor: $0["cursor"], record: try BuildLogRecord(row: $0)) }
    }

    private func bindText(_ handle: OpaquePointer, _ index: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            // An empty buffer may have no address; bind '' rather than NULL.
            guard let base = bytes.baseAddress, bytes.count > 0 else {
                _ = sqlite3_bind_text(handle, index, "", 0, SQLITE_TRANSIENT)
                return
            }
            _ = sqlite3_bind_text(handle, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self),
                                  Int32(bytes.count), SQLITE_TRANSIENT)
        }
    }
}

extension BuildRepository {
    /// Ends a build that is queued or running; false when it had ended
    /// already (its row is then unchanged). A run ends its build only
    /// under its lease: the caller checks its ``BuildFence`` in the same
    /// transaction (SQLiteBuildStore).
    func finish(_ db: Database, _ id: String, status: BuildStatus, exitCode: Int? = nil,
                progress: Double? = nil, at date: Date = Date()) throws -> Bool {
        precondition(status.isFinished, "finish needs a final status")
        try db.execute(sql: """
            UPDATE builds SET status = ?, endDate = ?, exitCode = ?, progress = coalesce(?, progress)
            WHERE id = ? AND status IN ('queued', 'running')
            """, arguments: [status.rawValue, date.timeIntervalSince1970, exitCode, progress, id])
        return db.changesCount > 0
    }

    /// Sets the progress (0…1) of a running build.
    func setProgress(_ db: Database, _ id: String, _ progress: Double) throws {
        try db.execute(sql: "UPDATE builds SET progress = ? WHERE id = ? AND status = 'running'",
                       arguments: [min(1, max(0, progress)), id])
    }

    /// Records the commit a build checked out.
    func setCommit(_ db: Database, _ id: String, _ commit: String) throws {
        try db.execute(sql: "UPDATE builds SET commitHash = ? WHERE id = ?", arguments: [commit, id])
    }
}

/// The reads of `jobs.*` as statements: the Lua bindings run them on the
/// `db` module's machinery (rows built once, into Lua tables), Swift
/// callers through ``QueryStatement/fetch(_:)``.
public enum BuildJobStatements {
    /// One build's row, or nothing.
    public static func build(_ id: String) -> QueryStatement {
        .init(sql: "SELECT * FROM builds WHERE id = ?", arguments: [id.databaseValue], shape: .row)
    }

    /// Builds, newest first, at most `limit`, optionally of one status,
    /// scheme (id) or project (bundle identifier).
    public static func list(status: BuildStatus? = nil, schemeId: String? = nil, projectId: String? = nil,
                            limit: Int) -> QueryStatement {
        var conditions: [String] = []
        var arguments: [DatabaseValue] = []
        if let status {
            conditions.append("builds.status = ?")
            arguments.append(status.rawValue.databaseValue)
        }
        if let schemeId {
            conditions.append("builds.schemeId = ?")
            arguments.append(schemeId.databaseValue)
        }
        if let projectId {
            conditions.append("schemes.projectBundleIdentifier = ?")
            arguments.append(projectId.databaseValue)
        }
        arguments.append(max(0, limit).databaseValue)
        return .init(sql: """
            SELECT builds.* FROM builds JOIN schemes ON schemes.id = builds.schemeId
            \(conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND "))
            ORDER BY builds.createdAt DESC, builds.buildNumber DESC LIMIT ?
            """, arguments: arguments, shape: .rows)
    }

    /// A build's crash logs, oldest first.
    public static func crashLogs(build id: String) -> QueryStatement {
        .init(sql: "SELECT * FROM crashLogs WHERE buildId = ? ORDER BY createdAt", arguments: [id.databaseValue],
              shape: .rows)
    }

    /// The rows of the builds `ids`, oldest first (ids without a row are
    /// left out). One statement whatever the count: the ids travel as one
    /// JSON array (`json_each` on SQLite, `json_array_elements_text` on
    /// PostgreSQL).
    public static func builds(ids: [String], dialect: SQLDialect) -> QueryStatement {
        let list = "[" + ids.map(JSONString.quoted).joined(separator: ",") + "]"
        let elements = switch dialect {
        case .sqlite: "SELECT value FROM json_each(?)"
        case .postgresql: "SELECT json_array_elements_text(?::text::json)"
        }
        return .init(sql: """
            SELECT * FROM builds WHERE id IN (\(elements)) ORDER BY createdAt, buildNumber
            """, arguments: [list.databaseValue], shape: .rows)
    }
}

extension QueryStatement {
    /// Runs the statement on `db` for a Swift caller: `.row` gives the row
    /// or `.null`, `.rows` an array of rows, `.ids` an array of values.
    func fetch(_ db: Database) throws -> StoreValue {
        let cached = try db.cachedStatement(sql: sql)
        let arguments = StatementArguments(self.arguments)
        switch shape {
        case .row: return try Row.fetchOne(cached, arguments: arguments).map(StoreValue.init) ?? .null
        case .rows: return .array(try Row.fetchAll(cached, arguments: arguments).map(StoreValue.init))
        case .ids: return .array(try DatabaseValue.fetchAll(cached, arguments: arguments).map(StoreValue.init))
        }
    }
}

/// Lines of a build's log after a cursor, and the build as it is in the
/// same snapshot (nil once deleted): a build seen ended with no line after
/// the cursor has no line left to come (the runner writes its last lines
/// before it ends the build).
public struct BuildLogPage: Sendable {
    public var lines: [BuildLogLine]
    public var build: BuildRecord?
}

extension Store {
    /// A page of `buildId`'s log after `cursor`, read through the store.
    public func logPage(build buildId: String, after cursor: Int64, limit: Int, includeDebug: Bool) throws -> BuildLogPage {
        try client.read { db in try logPage(db, build: buildId, after: cursor, limit: limit, includeDebug: includeDebug) }
    }

    func logPage(_ db: Database, build buildId: String, after cursor: Int64, limit: Int, includeDebug: Bool) throws -> BuildLogPage {
        BuildLogPage(lines: try buildLogs.lines(db, build: buildId, after: cursor, limit: limit, includeDebug: includeDebug),
                     build: try builds.records.get(db, buildId))
    }
}

extension SessionDatabase {
    /// A page of `buildId`'s log where the session reads (inside its
    /// transaction, with the transaction's own writes).
    public func logPage(build buildId: String, after cursor: Int64, limit: Int, includeDebug: Bool) throws -> BuildLogPage {
        try read { db in try store.logPage(db, build: buildId, after: cursor, limit: limit, includeDebug: includeDebug) }
    }
}
