import Foundation
import GRDB
import GRDBSQLite
import PostgresWire
import Synchronization
import TextCodec

/// Export and import of an aggregate as one JSON document, so that data
/// moves between databases: a project with its schemes and builds (and the
/// builds' logs and crash logs), or a model with its daily usage.
///
/// ```json
/// {
///   "format": "opsh-export",
///   "version": 1,
///   "kind": "project",
///   "key": "com.example.app",
///   "tables": {
///     "projects": [{"bundleIdentifier": "com.example.app", "name": "App", …, "createdAt": 1700000000.25}],
///     "schemes": [ … ], "builds": [ … ], "buildLogs": [ … ], "crashLogs": [ … ]
///   }
/// }
/// ```
///
/// Rows hold every column of their table under its schema name, with the
/// stored value: dates are seconds since 1970 (floats), NULL is `null`, and
/// JSON columns are their text, byte for byte, so that a round trip
/// reproduces the rows exactly.
///
/// An import checks the whole document first (format, version, every
/// field's presence and type, the values the record types accept, JSON
/// columns, each row's parent being in the document, rows that already
/// exist) and only then writes, inside the caller's transaction: either
/// every row is written or none is. A row whose key exists is refused
/// unless `replace` is set, in which case it is overwritten; rows of the
/// database that the document does not mention are left alone. Usage
/// stats are keyed by model and day; their integer id is kept when it is
/// free in the target database, else a new one is given.
public enum Transfer {
    public static let format = "opsh-export"
    public static let version: Int64 = 1

    /// What a document holds.
    public enum Kind: String, Sendable, CaseIterable {
        case project, model

        /// Its tables, parents before children.
        var tables: [TransferTableSpec] {
            switch self {
            case .project:
                return [
                    TransferTableSpec(ProjectRecord.self, key: ["bundleIdentifier"]),
                    TransferTableSpec(SchemeRecord.self, key: ["id"], parent: ("projectBundleIdentifier", "projects")),
                    TransferTableSpec(BuildRecord.self, key: ["id"], parent: ("schemeId", "schemes")),
                    TransferTableSpec(BuildLogRecord.self, key: ["id"], parent: ("buildId", "builds")),
                    TransferTableSpec(CrashLogRecord.self, key: ["incidentIdentifier"], parent: ("buildId", "builds")),
                ]
            case .model:
                return [
                    TransferTableSpec(ModelMetadataRecord.self, key: ["id"]),
                    TransferTableSpec(ModelUsageStatRecord.self, key: ["model_id", "day"], parent: ("model_id", "model_metadata"),
                              surrogateKey: "id"),
                ]
            }
        }
    }

    public struct ExportOptions: Sendable {
        /// Include the build logs and crash logs of the exported builds.
        public var logs: Bool
        public init(logs: Bool = true) { self.logs = logs }
    }

    public struct ImportOptions: Sendable {
        /// Overwrite rows whose key exists instead of refusing the import.
        public var replace: Bool
        public init(replace: Bool = false) { self.replace = replace }
    }

    /// Rows per table of an export or an import.
    public struct Summary: Sendable, Equatable {
        public struct Table: Sendable, Equatable {
            public var name: String
            /// Rows exported, or written by an import.
            public var rows: Int
            /// Of those, rows that overwrote an existing row.
            public var replaced: Int
        }
        public var kind: Kind
        /// The root's key: the project's bundle identifier, the model's id.
        public var key: String
        public var tables: [Table]

        public func rows(_ table: String) -> Int { tables.first { $0.name == table }?.rows ?? 0 }
    }

    // MARK: Export

    /// The document of a project: the project, its schemes, their builds,
    /// and (unless `logs` is false) the builds' logs and crash logs. Runs
    /// on either engine, and the same rows give the same document byte for
    /// byte on both: rows are ordered by their values only (text by its
    /// bytes, as SQLite's BINARY collation). Log lines written at the same
    /// instant are ordered by their id: opsh's own ids are the run's prefix
    /// and a zero-padded sequence, so that is the order they were written
    /// in. Not by insertion order: PostgreSQL has none to give (`ctid`
    /// does not follow it: a short row fills the gap an earlier page left).
    public static func exportProject(_ database: some RepositoryConnection, _ bundleIdentifier: String,
                                     options: ExportOptions = ExportOptions()) throws -> (text: String, summary: Summary) {
        let dialect = database.dialect
        let key: [StoreValue] = [.text(bundleIdentifier)]
        let project = try database.fetch("SELECT * FROM projects WHERE bundleIdentifier = ?", key)
        guard !project.rows.isEmpty else {
            throw StoreError.notFound(table: "projects", key: bundleIdentifier)
        }
        let builds = """
            SELECT id FROM builds WHERE schemeId IN (SELECT id FROM schemes WHERE projectBundleIdentifier = ?)
            """
        var tables: [(String, Rows)] = [
            ("projects", project),
            ("schemes", try database.fetch("""
                SELECT * FROM schemes WHERE projectBundleIdentifier = ?
                ORDER BY "order", \(byBytes("name", dialect)), \(byBytes("id", dialect))
                """, key)),
            ("builds", try database.fetch("""
                SELECT builds.* FROM builds JOIN schemes ON schemes.id = builds.schemeId
                WHERE schemes.projectBundleIdentifier = ?
                ORDER BY schemes."order", \(byBytes("schemes.name", dialect)), \(byBytes("schemes.id", dialect)),
                    builds.buildNumber, \(byBytes("builds.id", dialect))
                """, key)),
        ]
        if options.logs {
            tables.append(("buildLogs", try database.fetch("""
                SELECT * FROM buildLogs WHERE buildId IN (\(builds)) ORDER BY createdAt, \(byBytes("id", dialect))
                """, key)))
            tables.append(("crashLogs", try database.fetch("""
                SELECT * FROM crashLogs WHERE buildId IN (\(builds)) ORDER BY createdAt, \(byBytes("incidentIdentifier", dialect))
                """, key)))
        }
        return try document(kind: .project, key: bundleIdentifier, tables: tables)
    }

    /// The document of a model: its metadata and its daily usage stats.
    public static func exportModel(_ database: some RepositoryConnection, _ id: String) throws -> (text: String, summary: Summary) {
        let model = try database.fetch("SELECT * FROM model_metadata WHERE id = ?", [.text(id)])
        guard !model.rows.isEmpty else {
            throw StoreError.notFound(table: "model_metadata", key: id)
        }
        let usage = try database.fetch("""
            SELECT * FROM model_usage_stats WHERE model_id = ? ORDER BY \(byBytes("day", database.dialect)), id
            """, [.text(id)])
        return try document(kind: .model, key: id, tables: [("model_metadata", model), ("model_usage_stats", usage)])
    }

    /// GRDB callers (``Store``'s own methods, tests): the same on SQLite.
    static func exportProject(_ db: Database, _ bundleIdentifier: String,
                                     options: ExportOptions = ExportOptions()) throws -> (text: String, summary: Summary) {
        try exportProject(StoreDatabase(db), bundleIdentifier, options: options)
    }

    static func exportModel(_ db: Database, _ id: String) throws -> (text: String, summary: Summary) {
        try exportModel(StoreDatabase(db), id)
    }

    typealias Rows = (columns: [String], rows: [[StoreValue]])

    /// An ORDER BY term on a text column that sorts as SQLite's BINARY
    /// collation does, whatever the server's locale.
    static func byBytes(_ column: String, _ dialect: SQLDialect) -> String {
        dialect == .postgresql ? column + " COLLATE \"C\"" : column
    }

    static func document(kind: Kind, key: String, tables: [(String, Rows)]) throws -> (text: String, summary: Summary) {
        var members: [(String, JSON)] = []
        for (table, result) in tables {
            members.append((table, .array(try result.rows.map { row in
                .object(try zip(result.columns, row).map { column, value in
                    (column, try json(value, table: table, column: column))
                })
            })))
        }
        let document = JSON.object([
            ("format", .string(format)),
            ("version", .integer(version)),
            ("kind", .string(kind.rawValue)),
            ("key", .string(key)),
            ("tables", .object(members)),
        ])
        let summary = Summary(kind: kind, key: key,
                              tables: tables.map { Summary.Table(name: $0.0, rows: $0.1.rows.count, replaced: 0) })
        return (document.text() + "\n", summary)
    }

    static func json(_ value: StoreValue, table: String, column: String) throws -> JSON {
        switch value {
        case .null: return .null
        case let .integer(integer): return .integer(integer)
        case let .real(real):
            guard real.isFinite else {
                throw TransferError.unexportable("cannot export \(table).\(column): \(real) has no JSON form")
            }
            return .real(real)
        case let .text(text): return .string(text)
        case let .blob(bytes):
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw TransferError.unexportable("cannot export \(table).\(column): a BLOB that is not UTF-8 text")
            }
            return .string(text)
        case .array, .object:
            throw TransferError.unexportable("cannot export \(table).\(column): not a column value")
        }
    }

    // MARK: Import

    /// Checks the whole document, then writes its rows on `database`,
    /// which must be inside a transaction of the caller's: a failure
    /// part-way throws, and the caller's rollback leaves the database as
    /// it was.
    @discardableResult
    public static func importDocument(_ database: some RepositoryConnection, _ text: String,
                                      options: ImportOptions = ImportOptions()) throws -> Summary {
        try apply(database, try prepareImport(database, text), options: options)
    }

    @discardableResult
    static func importDocument(_ db: Database, _ text: String,
                                      options: ImportOptions = ImportOptions()) throws -> Summary {
        try importDocument(StoreDatabase(db), text, options: options)
    }

    /// A document read and checked, ready to write.
    public struct PreparedImport: @unchecked Sendable {
        let plan: Plan
    }

    /// Reads and checks the whole document (the costly part) on
    /// `database`, a read: the write lock is not needed, so a large import
    /// holds it only for ``apply(_:_:options:rowByRowObservers:)``
    /// (ARCHITECTURE.md, decision 8).
    public static func prepareImport(_ database: some RepositoryConnection, _ text: String) throws -> PreparedImport {
        PreparedImport(plan: try validate(database, text))
    }

    static func prepareImport(_ db: Database, _ text: String) throws -> PreparedImport {
        try prepareImport(StoreDatabase(db), text)
    }

    /// Writes a prepared document on `database`, inside the caller's write
    /// transaction. Which rows exist is looked up again here (another
    /// process may have written since the document was checked); the rest
    /// of the checks hold, and the database's constraints back them.
    ///
    /// On SQLite new rows go in by multi-row INSERTs of up to
    /// ``rowsPerInsert`` rows (with `rowByRowObservers` false, through
    /// SQLite's C API: GRDB's transaction observers are told per table at
    /// the end); on PostgreSQL each run of a table's new rows is one COPY
    /// FROM STDIN (``writeInBatches(_:_:)``).
    ///
    /// - parameter rowByRowObservers: GRDB's transaction observers must see
    ///   each row (a dry run counts them); otherwise new rows are stepped
    ///   with SQLite's C API and observers are told per table at the end.
    @discardableResult
    public static func apply(_ database: some RepositoryConnection, _ prepared: PreparedImport,
                             options: ImportOptions = ImportOptions(), rowByRowObservers: Bool = true) throws -> Summary {
        var plan = prepared.plan
        // Rows are looked up again only where that can matter: with
        // `replace`, when the check found rows already there, or for a table
        // whose identity is not its primary key (a surrogate id). Otherwise a
        // row written since the check makes its INSERT fail on the primary
        // key, and the conflicts are looked up then: a large import holds
        // the lock only for its inserts.
        let lookUpAll = options.replace || plan.rows.contains { $0.existing != nil }
        // Only when some row is looked up: `&plan.rows` would copy every
        // row (the prepared import holds them too), under the write lock.
        if lookUpAll || plan.rows.contains(where: { $0.table.surrogateKey != nil }) {
            try lookUpExisting(database, &plan.rows) { lookUpAll || $0.table.surrogateKey != nil }
        }
        let conflicts = plan.rows.filter { $0.existing != nil }
        if !conflicts.isEmpty && !options.replace {
            let named = conflicts.prefix(5).map { "\($0.table.name) \($0.keyDescription)" }.joined(separator: ", ")
            let more = conflicts.count > 5 ? " and \(conflicts.count - 5) more" : ""
            throw TransferError.conflict(
                "import refused: \(conflicts.count) row(s) already exist (\(named)\(more)); nothing was written; "
                    + "import with replace = true to overwrite them")
        }
        // Written by someone else since the check: name them all. Only
        // rows from `firstUnwritten` on are looked up: the rows before it
        // are this import's own, written in this transaction (one of them
        // that existed would have been refused), and the statement that
        // failed was undone.
        func writtenSince(_ firstUnwritten: Int) throws -> TransferError? {
            var rows = Array(plan.rows[firstUnwritten...])
            try lookUpExisting(database, &rows) { _ in true }
            let existing = rows.filter { $0.existing != nil }
            guard !existing.isEmpty else { return nil }
            let named = existing.prefix(5).map { "\($0.table.name) \($0.keyDescription)" }.joined(separator: ", ")
            return TransferError.conflict(
                "import refused: \(existing.count) row(s) were written by another process since the document was checked (\(named)); nothing was written; import again"
                    + (options.replace ? "" : ", with replace = true to overwrite them"))
        }
        var counts = Dictionary(uniqueKeysWithValues: plan.kind.tables.map { ($0.name, (rows: 0, replaced: 0)) })
        for row in plan.rows {
            counts[row.table.name]!.rows += 1
            if row.existing != nil { counts[row.table.name]!.replaced += 1 }
        }
        if let sqlite = database as? StoreDatabase {
            let db = sqlite.db
            // New rows of one table and column set, waiting to go in
            // together (``insertRows(_:on:)``).
            var pending: [PlannedRow] = []
            pending.reserveCapacity(rowsPerInsert)
            // The rows before this one are written.
            var written = 0
            let parameterLimit = Int(sqlite3_limit(db.sqliteConnection, SQLITE_LIMIT_VARIABLE_NUMBER, -1))
            func insertPending() throws {
                guard !pending.isEmpty else { return }
                try insertRows(pending[...], on: db)
                written += pending.count
                pending.removeAll(keepingCapacity: true)
            }
            do {
                for row in plan.rows {
                    guard !rowByRowObservers, row.existing == nil, row.table.surrogateKey == nil else {
                        try insertPending()
                        try write(db, row, stepsRaw: !rowByRowObservers)
                        written += 1
                        continue
                    }
                    if let first = pending.first,
                       first.table.name != row.table.name || !first.fields.lazy.map(\.0).elementsEqual(row.fields.lazy.map(\.0)) {
                        try insertPending()
                    }
                    pending.append(row)
                    if pending.count == rowsPerInsert(columns: row.fields.count, parameterLimit: parameterLimit) { try insertPending() }
                }
                try insertPending()
            } catch let error as DatabaseError where !lookUpAll && error.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY {
                throw try writtenSince(written) ?? error
            }
            if !rowByRowObservers {
                for table in plan.kind.tables where counts[table.name]!.rows > 0 { try db.notifyChanges(in: Table(table.name)) }
            }
        } else {
            var written = 0
            do {
                try writeInBatches(database, plan.rows, written: &written)
            } catch let error as PostgresError where error.code == "23505" {
                // A key written since the check (the multi-row INSERT was
                // rolled back to its savepoint: the lookup can run), else
                // another UNIQUE constraint, worded as the repositories do.
                if !lookUpAll, let conflict = try writtenSince(written) { throw conflict }
                throw refusal(error, table: PostgresNames.rowKey(error.fields["t"] ?? "import"))
            }
        }
        return Summary(kind: plan.kind, key: plan.key, tables: plan.kind.tables.map { table in
            Summary.Table(name: table.name, rows: counts[table.name]!.rows, replaced: counts[table.name]!.replaced)
        })
    }

    /// One row to write, checked.
    struct PlannedRow {
        let table: TransferTableSpec
        let fields: [(String, DatabaseValue)]
        let keyValues: [DatabaseValue]
        /// The existing row with the same key (its surrogate id, if any).
        var existing: DatabaseValue?
        /// The largest surrogate id of this table's rows in the document.
        var largestDocumentId: Int64?

        var keyDescription: String {
            keyValues.map { value -> String in
                if case let .string(text) = value.storage { return "\"\(text)\"" }
                return value.description
            }.joined(separator: "/")
        }
    }

    struct Plan {
        let kind: Kind
        let key: String
        var rows: [PlannedRow]
    }

    /// Everything an import checks before it writes.
    static func validate(_ database: some RepositoryConnection, _ text: String) throws -> Plan {
        let document: JSON
        do {
            document = try JSON.parse(text)
        } catch let failure as JSONParser.Failure {
            throw TransferError.document("not valid JSON at line \(failure.line), column \(failure.column): \(failure.reason)")
        }
        guard case let .object(members) = document else {
            throw TransferError.document("an export document must be a JSON object, got \(document.typeName)")
        }
        let known = ["format", "version", "kind", "key", "tables"]
        if let unknown = members.first(where: { !known.contains($0.0) }) {
            throw TransferError.document("unknown field '\(unknown.0)' in the document (fields: \(known.joined(separator: ", ")))")
        }
        func field(_ name: String) throws -> JSON {
            guard let value = document[name] else { throw TransferError.document("missing field '\(name)' in the document") }
            return value
        }
        guard case .string(format) = try field("format") else {
            throw TransferError.document("not an opsh export: format must be \"\(format)\"")
        }
        switch try field("version") {
        case .integer(version): break
        case let .integer(other):
            throw TransferError.document("unsupported export version \(other) (this opsh reads version \(version))")
        case let other:
            throw TransferError.document("field 'version': integer expected, got \(other.typeName)")
        }
        guard case let .string(kindName) = try field("kind"), let kind = Kind(rawValue: kindName) else {
            throw TransferError.document("field 'kind': one of \(Kind.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")) expected")
        }
        guard case let .string(key) = try field("key") else {
            throw TransferError.document("field 'key': string expected, got \(try field("key").typeName)")
        }
        guard case let .object(tableMembers) = try field("tables") else {
            throw TransferError.document("field 'tables': object expected, got \(try field("tables").typeName)")
        }
        let specs = kind.tables
        if let unknown = tableMembers.first(where: { member in !specs.contains { $0.name == member.0 } }) {
            throw TransferError.document("unknown table '\(unknown.0)' in a \(kind.rawValue) export (tables: \(specs.map(\.name).joined(separator: ", ")))")
        }

        var rows: [PlannedRow] = []
        // Keys of each table's rows in the document: children point at them.
        var documentKeys: [String: Set<DatabaseValue>] = [:]
        for spec in specs {
            let value = tableMembers.first { $0.0 == spec.name }?.1 ?? .array([])
            guard case let .array(items) = value else {
                throw TransferError.document("tables.\(spec.name): array expected, got \(value.typeName)")
            }
            if spec.parent == nil {
                guard items.count == 1 else {
                    throw TransferError.document("tables.\(spec.name): exactly one row expected, got \(items.count)")
                }
            }
            let columns = try spec.columns(database)
            let columnNames = columns.map(\.name)
            var seen = Set<[DatabaseValue]>()
            for (index, item) in items.enumerated() {
                let place = "\(spec.name)[\(index + 1)]"
                let fields = try spec.fields(of: item, columns: columns, place: place)
                for (column, value) in fields {
                    // A NUL byte (`\u0000`): kept on SQLite, refused where text cannot hold it.
                    if case let .string(text) = value.storage, let reason = database.dialect.refusal(ofText: text) {
                        throw TransferError.document("\(place): field '\(column)': \(reason)")
                    }
                }
                let values = Dictionary(uniqueKeysWithValues: fields)
                let keyValues = spec.key.map { values[$0]! }
                guard seen.insert(keyValues).inserted else {
                    throw TransferError.document("\(place): a second row with the key \(keyValues.map(\.description).joined(separator: "/"))")
                }
                if spec.parent == nil, case let .string(rootKey) = keyValues[0].storage, rootKey != key {
                    throw TransferError.document("\(place): \(spec.key[0]) \"\(rootKey)\" is not the document's key \"\(key)\"")
                }
                try spec.check(database, values, columns: columnNames, place: place)
                if let (column, parentTable) = spec.parent {
                    guard documentKeys[parentTable]?.contains(values[column]!) == true else {
                        throw TransferError.document("\(place): \(column) \(values[column]!.description) is not a row of \(parentTable) in the document")
                    }
                }
                documentKeys[spec.name, default: []].insert(keyValues[0])
                rows.append(PlannedRow(table: spec, fields: fields, keyValues: keyValues, existing: nil))
            }
        }
        try lookUpExisting(database, &rows) { _ in true }
        for spec in specs {
            guard let surrogate = spec.surrogateKey else { continue }
            let largest = rows.filter { $0.table.name == spec.name }
                .compactMap { row in row.fields.first { $0.0 == surrogate }.flatMap { Int64.fromDatabaseValue($0.1) } }.max()
            for index in rows.indices where rows[index].table.name == spec.name { rows[index].largestDocumentId = largest }
        }
        return Plan(kind: kind, key: key, rows: rows)
    }

    /// Sets ``PlannedRow/existing`` of the rows `selected` picks: on
    /// SQLite one cached point query per row (in process, the cheapest
    /// way); elsewhere (a round trip per statement) one query per 500 keys
    /// of a table (`WHERE key IN (…)`, `WHERE (a, b) IN ((…), …)`).
    static func lookUpExisting(_ database: some RepositoryConnection, _ rows: inout [PlannedRow],
                               selected: (PlannedRow) -> Bool) throws {
        if let sqlite = database as? StoreDatabase {
            for index in rows.indices where selected(rows[index]) {
                rows[index].existing = try rows[index].table.existing(sqlite.db, rows[index].keyValues)
            }
            return
        }
        let dialect = database.dialect
        var start = 0
        while start < rows.count {
            let spec = rows[start].table
            var end = start
            while end < rows.count && rows[end].table.name == spec.name { end += 1 }
            let indices = (start..<end).filter { selected(rows[$0]) }
            start = end
            var offset = 0
            while offset < indices.count {
                let batch = indices[offset..<min(offset + 500, indices.count)]
                offset += batch.count
                let keyColumns = spec.key.map(dialect.quote)
                let tuple = spec.key.count == 1 ? "?" : "(" + Array(repeating: "?", count: spec.key.count).joined(separator: ", ") + ")"
                let target = spec.key.count == 1 ? keyColumns[0] : "(" + keyColumns.joined(separator: ", ") + ")"
                let sql = "SELECT \(keyColumns.joined(separator: ", ")), \(dialect.quote(spec.surrogateKey ?? spec.key[0])) "
                    + "FROM \(dialect.quote(spec.name)) WHERE \(target) IN (\(Array(repeating: tuple, count: batch.count).joined(separator: ", ")))"
                let found = try database.fetch(sql, batch.flatMap { rows[$0].keyValues.map(StoreValue.init) })
                var existing: [[DatabaseValue]: DatabaseValue] = [:]
                for row in found.rows {
                    existing[row.prefix(spec.key.count).map(\.databaseValue)] = row[spec.key.count].databaseValue
                }
                for index in batch { rows[index].existing = existing[rows[index].keyValues] }
            }
        }
    }

    /// Writes the rows on an engine other than SQLite: each run of new
    /// rows of one table in one write (on PostgreSQL a COPY FROM STDIN under
    /// the session's rules, as `db.copy`: ``PostgresDatabase/copy(_:reportingServerErrors:)``;
    /// otherwise multi-row INSERTs of up to 1,000 rows and 30,000 values),
    /// an existing row by an UPDATE, a row with a surrogate id on its own
    /// (its id may have to be chosen) by an INSERT: one round trip, where a
    /// COPY's savepoint, data and release take three.
    ///
    /// - parameter written: how many of `rows`, from the first, are written
    ///   (when it throws, the rest are not).
    static func writeInBatches(_ database: some RepositoryConnection, _ rows: [PlannedRow], written: inout Int) throws {
        let dialect = database.dialect
        let copying = ((database as? AnyRepositoryConnection)?.base ?? database) as? PostgresDatabase
        // A COPY has no parameters to count: its run is cut only to bound
        // the values held twice (the plan's and the copy's).
        let largestRun = copying == nil ? (rows: 1000, values: 30000) : (rows: 50000, values: 1_000_000)
        var pending: [PlannedRow] = []
        func flush() throws {
            guard let first = pending.first else { return }
            defer { pending = [] }
            guard let copying else {
                try insert(pending)
                written += pending.count
                return
            }
            let request = try CopyRequest(table: first.table.name, columns: first.fields.map(\.0),
                                          source: .rows(pending.map { row in row.fields.map { StoreValue($0.1) } }))
            do {
                _ = try copying.copy(request, reportingServerErrors: true)
            } catch let error as PostgresError {
                if error.code == "23505" { throw error }
                throw refusal(error, table: first.table.name)
            }
            written += pending.count
        }
        func insert(_ rows: [PlannedRow]) throws {
            let first = rows[0]
            let columns = first.fields.map(\.0)
            let tuple = "(" + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")"
            let head = "INSERT INTO \(dialect.quote(first.table.name)) (\(columns.map(dialect.quote).joined(separator: ", "))) VALUES "
            var arguments: [StoreValue] = []
            arguments.reserveCapacity(rows.count * columns.count)
            for row in rows { for field in row.fields { arguments.append(StoreValue(field.1)) } }
            do {
                try database.execute(head + Array(repeating: tuple, count: rows.count).joined(separator: ", "), arguments)
            } catch var error as PostgresError {
                if error.code == "23505" { throw error }
                // The statement is 1,000 rows of placeholders: say which.
                error.sql = head + "\(tuple), … (\(rows.count) rows)"
                throw refusal(error, table: first.table.name)
            }
        }
        for row in rows {
            if let last = pending.last, last.table.name != row.table.name || last.fields.map(\.0) != row.fields.map(\.0)
                || pending.count >= largestRun.rows || (pending.count + 1) * row.fields.count > largestRun.values {
                try flush()
            }
            let table = dialect.quote(row.table.name)
            if let existing = row.existing {
                try flush()
                let changed = row.fields.filter { !row.table.key.contains($0.0) && $0.0 != row.table.surrogateKey }
                let keyColumn = row.table.surrogateKey ?? row.table.key[0]
                let keyValue = row.table.surrogateKey == nil ? row.keyValues[0] : existing
                do {
                    try database.execute(
                        "UPDATE \(table) SET \(changed.map { "\(dialect.quote($0.0)) = ?" }.joined(separator: ", ")) WHERE \(dialect.quote(keyColumn)) = ?",
                        changed.map { StoreValue($0.1) } + [StoreValue(keyValue)])
                } catch let error as PostgresError {
                    throw refusal(error, table: row.table.name)
                }
                written += 1
                continue
            }
            guard let surrogate = row.table.surrogateKey else {
                pending.append(row)
                continue
            }
            try flush()
            var fields = row.fields
            if let index = fields.firstIndex(where: { $0.0 == surrogate }), !fields[index].1.isNull,
               try database.exists("SELECT 1 FROM \(table) WHERE \(dialect.quote(surrogate)) = ?", [StoreValue(fields[index].1)]) {
                // As on SQLite (``write(_:_:stepsRaw:)``): a new id above
                // every id of the table and of the document.
                let floor = try database.integer("SELECT max(\(dialect.quote(surrogate))) FROM \(table)") ?? 0
                fields[index].1 = (max(floor, row.largestDocumentId ?? 0) + 1).databaseValue
            }
            try insert([PlannedRow(table: row.table, fields: fields, keyValues: row.keyValues, existing: nil)])
            written += 1
        }
        try flush()
        if dialect == .postgresql {
            // Identity columns do not follow ids given explicitly: move
            // each surrogate's sequence past the largest id, as SQLite's
            // rowid would be.
            // (Never backwards; like any sequence, not rolled back.)
            for spec in Set(rows.compactMap { $0.table.surrogateKey == nil ? nil : $0.table.name }).sorted() {
                guard let surrogate = rows.first(where: { $0.table.name == spec })?.table.surrogateKey else { continue }
                _ = try database.fetch("""
                    SELECT setval(sequence, largest) FROM (
                        SELECT pg_get_serial_sequence(?, ?) AS sequence,
                               (SELECT max(\(dialect.quote(surrogate))) FROM \(dialect.quote(spec))) AS largest
                    ) AS given
                    WHERE sequence IS NOT NULL AND largest > coalesce(pg_sequence_last_value(sequence::regclass), 0)
                    """, [.text(spec.lowercased()), .text(surrogate.lowercased())])
            }
        }
    }

    /// A write the server refused, worded as the repositories word it
    /// (a constraint's own words in parentheses); other errors as they are.
    static func refusal(_ error: PostgresError, table: String) -> any Error {
        guard let reason = PostgresDatabase.describe(error, table: table) else { return error }
        return StoreError.refused(reason: "import: " + reason + (error.detail.map { " (\($0))" } ?? "") + "; nothing was written")
    }

    static func write(_ db: Database, _ row: PlannedRow, stepsRaw: Bool) throws {
        let table = quoteIdentifier(row.table.name)
        if let existing = row.existing {
            // Overwrite every column but the key (and a surrogate id, kept).
            let changed = row.fields.filter { !row.table.key.contains($0.0) && $0.0 != row.table.surrogateKey }
            let keyColumn = row.table.surrogateKey ?? row.table.key[0]
            let keyValue = row.table.surrogateKey == nil ? row.keyValues[0] : existing
            let update = try db.cachedStatement(
                sql: "UPDATE \(table) SET \(changed.map { "\(quoteIdentifier($0.0)) = ?" }.joined(separator: ", ")) WHERE \(quoteIdentifier(keyColumn)) = ?")
            try update.bindExactly(changed.map(\.1) + [keyValue])
            try update.execute()
            return
        }
        var fields = row.fields
        if let surrogate = row.table.surrogateKey, let index = fields.firstIndex(where: { $0.0 == surrogate }),
           !fields[index].1.isNull,
           try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM \(table) WHERE \(quoteIdentifier(surrogate)) = ?)"),
                             arguments: [fields[index].1]) == true {
            // The id belongs to another row here: take a new one, above
            // every id of the table and of the document (whose own ids
            // come later and must stay free).
            let floor = try Int64.fetchOne(db, sql: "SELECT max(\(quoteIdentifier(surrogate))) FROM \(table)") ?? 0
            fields[index].1 = (max(floor, row.largestDocumentId ?? 0) + 1).databaseValue
        }
        // Cached: the rows of one table share their statement.
        let statement = try db.cachedStatement(sql: row.table.insertSQL(columns: fields.map { $0.0 }))
        guard stepsRaw else {
            try statement.bindExactly(fields.map { $0.1 })
            return try statement.execute()
        }
        // Stepped outside GRDB: counted by the connection's preupdate hook.
        try Self.insertRaw(statement, fields, on: db)
    }

    /// At most this many rows go in by one INSERT (``insertRows(_:on:)``).
    static let rowsPerInsert = 64

    /// How many rows of `columns` values one INSERT takes: ``rowsPerInsert``,
    /// fewer when the connection allows fewer than `parameterLimit` parameters.
    static func rowsPerInsert(columns: Int, parameterLimit: Int) -> Int {
        max(1, min(rowsPerInsert, parameterLimit / max(columns, 1)))
    }

    /// Inserts `rows` (new rows of one table and column set) by one
    /// multi-row INSERT, bound and stepped with SQLite's C API, under the
    /// write lock. One statement for many rows: each execution of a
    /// statement costs its start and end (cursors opened on the table and
    /// its indexes, and the ephemeral table SQLite builds for a CHECK's
    /// `IN (…)` list, such as buildLogs.level's), which a row at a time
    /// paid per row. GRDB's observers do not see these rows
    /// (``apply(_:_:options:rowByRowObservers:)`` tells them per table
    /// afterwards); the connection's preupdate hook counts each.
    private static func insertRows(_ rows: ArraySlice<PlannedRow>, on db: Database) throws {
        guard let first = rows.first else { return }
        let statement = try db.cachedStatement(sql: first.table.insertSQL(columns: first.fields.map(\.0), rows: rows.count))
        let handle = statement.sqliteStatement
        sqlite3_reset(handle)
        defer {
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
        }
        var index: Int32 = 1
        for row in rows {
            for field in row.fields {
                // Text with its length: a NUL byte in it is kept.
                ExactBinding.bind(field.1, to: handle, at: index)
                index += 1
            }
        }
        let code = sqlite3_step(handle)
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
                                sql: statement.sql)
        }
    }

    /// Binds and steps an INSERT with SQLite's C API: GRDB's arguments cost
    /// more than the insert itself, and this runs under the write lock.
    /// GRDB's observers do not see these rows (``apply(_:_:options:rowByRowObservers:)``
    /// tells them per table afterwards).
    private static func insertRaw(_ statement: Statement, _ fields: [(String, DatabaseValue)], on db: Database) throws {
        let handle = statement.sqliteStatement
        sqlite3_reset(handle)
        defer {
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
        }
        for offset in fields.indices {
            // Text with its length: a NUL byte in it is kept.
            ExactBinding.bind(fields[offset].1, to: handle, at: Int32(offset + 1))
        }
        let code = sqlite3_step(handle)
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
                                sql: statement.sql)
        }
    }
}

/// How one table travels: its identity key, its parent in the aggregate,
/// and the record type that checks its rows.
struct TransferTableSpec: @unchecked Sendable {
    let name: String
    /// The columns that identify a row across databases.
    let key: [String]
    /// The column pointing at the parent, and the parent's table.
    let parent: (column: String, table: String)?
    /// An integer id that is not part of the identity (kept when free).
    let surrogateKey: String?
    let jsonColumns: [String]
    /// The table's primary key column (for ``columns(_:)``).
    let primaryKey: String
    /// Decodes the row (given the table's columns) as its record type:
    /// refuses values it does not accept.
    let decode: ([String: DatabaseValue], [String]) throws -> Void
    /// The last INSERT made by ``insertSQL(columns:)``.
    let insertStatements = InsertText()
    final class InsertText: Sendable { let text = Mutex<(columns: [String], rows: Int, sql: String)?>(nil) }

    init<Record: StoreRecord>(_ type: Record.Type, key: [String], parent: (String, String)? = nil,
                              surrogateKey: String? = nil) {
        name = Record.databaseTableName
        self.key = key
        self.parent = parent.map { (column: $0.0, table: $0.1) }
        self.surrogateKey = surrogateKey
        jsonColumns = Record.jsonColumns
        primaryKey = Record.primaryKeyColumns[0]
        decode = { fields, columns in _ = try RecordRepository<Record>().makeRecord(fields: fields, columns: columns) }
    }

    /// The table's columns as the target database has them (as the
    /// repositories read them: ``RecordTable/spec(_:)``).
    func columns(_ database: some RepositoryConnection) throws -> [ColumnSpec] {
        try database.tableSpec(name, primaryKey: primaryKey, jsonColumns: jsonColumns, booleans: []).columns
    }

    /// The row's fields in schema order, each checked against the column's
    /// declared type and NOT NULL.
    func fields(of item: JSON, columns: [ColumnSpec], place: String) throws -> [(String, DatabaseValue)] {
        guard case let .object(members) = item else {
            throw TransferError.document("\(place): object expected, got \(item.typeName)")
        }
        if let unknown = members.first(where: { member in !columns.contains { $0.name == member.0 } }) {
            throw TransferError.document("\(place): unknown field '\(unknown.0)' (columns: \(columns.map(\.name).joined(separator: ", ")))")
        }
        return try columns.map { column in
            guard let value = item[column.name] else {
                throw TransferError.document("\(place): missing field '\(column.name)'")
            }
            // The declared type's affinity: PostgreSQL's bigint and double
            // precision read as SQLite's INTEGER and REAL.
            let type = switch column.kind {
            case .text, .json: "TEXT"
            case .integer, .boolean: "INTEGER"
            case .real: "REAL"
            }
            // An integer primary key may be null (the database gives one;
            // PostgreSQL's identity column is NOT NULL in the catalog).
            let nullable = column.isPrimaryKey ? type == "INTEGER" : !column.notNull
            switch (value, type) {
            case (.null, _):
                guard nullable else { throw TransferError.document("\(place): field '\(column.name)' must not be null") }
                return (column.name, .null)
            case let (.string(text), "TEXT"): return (column.name, text.databaseValue)
            case let (.integer(integer), "INTEGER"): return (column.name, integer.databaseValue)
            case let (.integer(integer), "REAL"): return (column.name, Double(integer).databaseValue)
            case let (.real(real), "REAL"): return (column.name, real.databaseValue)
            default:
                let expected = ["TEXT": "string", "INTEGER": "integer", "REAL": "number"][type] ?? type.lowercased()
                throw TransferError.document("\(place): field '\(column.name)': \(expected) expected, got \(value.typeName)")
            }
        }
    }

    /// What the record type and the JSON columns accept.
    func check(_ database: some RepositoryConnection, _ values: [String: DatabaseValue], columns: [String],
               place: String) throws {
        do {
            try decode(values, columns)
        } catch let error as StoreError {
            if case let .invalidValue(_, column, reason) = error {
                throw TransferError.document("\(place): field '\(column)': \(reason)")
            }
            throw TransferError.document("\(place): \(error)")
        }
        for column in jsonColumns {
            guard let value = values[column], case let .string(text) = value.storage else { continue }
            if try !database.isValidJSON(text) {
                throw TransferError.document("\(place): field '\(column)': not valid JSON: \(TextBytes.visible(text, limit: 60))")
            }
        }
    }

    /// `INSERT INTO table (columns) VALUES (?, …)`, made once per table for
    /// the columns its rows have (all of them, in schema order).
    /// `INSERT INTO table (columns) VALUES (?, …)`, with `rows` rows of
    /// parameters.
    func insertSQL(columns: [String], rows: Int = 1) -> String {
        if let made = insertStatements.text.withLock({ $0 }), made.rows == rows, made.columns == columns { return made.sql }
        let values = "(" + databaseQuestionMarks(count: columns.count) + ")"
        let sql = "INSERT INTO \(quoteIdentifier(name)) (\(columns.map(quoteIdentifier).joined(separator: ", "))) VALUES "
            + repeatElement(values, count: rows).joined(separator: ", ")
        insertStatements.text.withLock { $0 = (columns, rows, sql) }
        return sql
    }

    /// The existing row with this key: its key value (or surrogate id).
    func existing(_ db: Database, _ keyValues: [DatabaseValue]) throws -> DatabaseValue? {
        let condition = key.map { "\(quoteIdentifier($0)) = ?" }.joined(separator: " AND ")
        let selected = quoteIdentifier(surrogateKey ?? key[0])
        // Cached: an import looks up every row of the document again in its
        // write transaction.
        let statement = try db.cachedStatement(sql: "SELECT \(selected) FROM \(quoteIdentifier(name)) WHERE \(condition)")
        try statement.bindExactly(keyValues)
        let row = try Row.fetchOne(statement)
        return row.map { $0[0] as DatabaseValue }
    }
}

extension Store {
    /// Exports a project (see ``Transfer/exportProject(_:_:options:)``) from a snapshot.
    public func exportProject(_ bundleIdentifier: String, options: Transfer.ExportOptions = .init()) throws -> (text: String, summary: Transfer.Summary) {
        try writer.read { db in try Transfer.exportProject(db, bundleIdentifier, options: options) }
    }

    /// Exports a model with its usage from a snapshot.
    public func exportModel(_ id: String) throws -> (text: String, summary: Transfer.Summary) {
        try writer.read { db in try Transfer.exportModel(db, id) }
    }

    /// Imports a document in one transaction: every row or none.
    @discardableResult
    public func importDocument(_ text: String, options: Transfer.ImportOptions = .init()) throws -> Transfer.Summary {
        try writer.write { db in try Transfer.importDocument(db, text, options: options) }
    }
}

