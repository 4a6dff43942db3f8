import Foundation
import GRDB
import TextCodec

// The configuration aggregate over ``RepositoryConnection``: the same
// reading, merge and saving on every engine. Records are decoded from the
// rows the connection returns, as GRDB decodes them from SQLite's, and
// saved with upserts (`INSERT … ON CONFLICT … DO UPDATE`, which SQLite and
// PostgreSQL both have).

extension ConfigurationRepository {
    /// The configuration with this id as stored; nil when there is none.
    public func stored(_ database: some RepositoryConnection, id: String) throws -> StoredConfiguration? {
        let dialect = database.dialect
        let found: [ConfigurationRecord] = try Self.records(database, "SELECT * FROM configuration WHERE id = ?", [.text(id)])
        guard let record = found.first else { return nil }
        let policies: [RoutingPolicyRecord] = try Self.records(database, """
            SELECT * FROM routing_policies WHERE configuration_id = ?
            ORDER BY \(dialect.orderTerm("priority", descending: true, isText: false)), \(dialect.orderTerm("name", descending: false, isText: true))
            """, [.text(id)])
        let analytics: [AnalyticsConfigRecord] = try Self.records(
            database, "SELECT * FROM analytics_config WHERE configuration_id = ?", [.text(id)])
        let storage: [StorageConfigRecord] = try Self.records(
            database, "SELECT * FROM storage_config WHERE configuration_id = ?", [.text(id)])
        return StoredConfiguration(record: record, policies: policies, analytics: analytics.first, storage: storage.first)
    }

    /// Merges `changes` into the stored configuration (see
    /// ``ConfigurationChanges``) and saves the whole aggregate in the
    /// caller's transaction; returns it as stored.
    public func merge(_ database: some RepositoryConnection, _ changes: ConfigurationChanges) throws -> StoredConfiguration {
        let id = changes.id
        let existing = try stored(database, id: id)

        var row: [String: DatabaseValue] = try existing?.record.databaseDictionary ?? [:]
        for (name, value) in changes.row { row[name] = value }
        row["id"] = id.databaseValue
        let now = Date().timeIntervalSince1970.databaseValue
        if row["created_at"] == nil { row["created_at"] = now }
        if changes.row["updated_at"] == nil { row["updated_at"] = now }
        if row["model_cache_size"] == nil { row["model_cache_size"] = 0.databaseValue }
        guard row["base_url"] != nil else { throw ConfigurationMergeError.missingBaseURL }
        let record: ConfigurationRecord = try Self.decode(row, table: "configuration")
        var configuration = SDKConfiguration(
            id: id, apiKey: record.apiKey, baseURL: record.baseUrl, modelCacheSize: record.modelCacheSize,
            createdAt: record.createdAt, updatedAt: record.updatedAt)

        if let given = changes.routingPolicies {
            let spec = try database.tableSpec("routing_policies", primaryKey: "id", jsonColumns: ["conditions"], booleans: [])
            for (offset, fields) in given.enumerated() {
                var fields = fields
                fields["configuration_id"] = id.databaseValue
                if fields["id"] == nil { fields["id"] = makeIdentifier().databaseValue }
                for column in spec.columns where fields[column.name] == nil {
                    guard let sql = column.defaultSQL else {
                        throw ConfigurationMergeError.missingPolicyField(index: offset + 1, column: column.name)
                    }
                    fields[column.name] = (try database.value("SELECT \(sql)") ?? .null).databaseValue
                }
                let policy: RoutingPolicyRecord = try Self.decode(fields, table: "routing_policies")
                configuration.routingPolicies.append(try Self.policy(policy))
            }
            let ids = configuration.routingPolicies.map(\.id)
            if let duplicate = ids.first(where: { id in ids.filter { $0 == id }.count > 1 }) {
                throw ConfigurationMergeError.duplicatePolicyId(duplicate)
            }
        } else {
            configuration.routingPolicies = try (existing?.policies ?? []).map(Self.policy)
        }

        let analyticsRecord = try Self.merged(existing?.analytics ?? AnalyticsConfigRecord(configurationId: id),
                                              changes.analytics, table: "analytics_config")
        configuration.analytics.enabled = analyticsRecord.enabled
        configuration.analytics.samplingRate = analyticsRecord.samplingRate
        configuration.analytics.batchSize = analyticsRecord.batchSize
        configuration.analytics.flushIntervalSeconds = analyticsRecord.flushIntervalSeconds

        let storageRecord = try Self.merged(existing?.storage ?? StorageConfigRecord(configurationId: id),
                                            changes.storage, table: "storage_config")
        configuration.storage.maxCacheSizeBytes = storageRecord.maxCacheSizeBytes
        configuration.storage.telemetryRetentionDays = storageRecord.telemetryRetentionDays
        configuration.storage.autoCleanup = storageRecord.autoCleanup

        try save(database, configuration)
        guard let saved = try stored(database, id: id) else { throw StoreError.notFound(table: "configuration", key: id) }
        return saved
    }

    /// Stores the whole aggregate: the row, its settings, and exactly its
    /// policies (policies no longer listed are removed).
    public func save(_ database: some RepositoryConnection, _ configuration: SDKConfiguration) throws {
        let (record, policies, analyticsRecord, storageRecord) = try mapToRecords(configuration)
        try Self.upsert(database, "configuration", key: "id", try record.databaseDictionary)
        try Self.upsert(database, "analytics_config", key: "configuration_id", try analyticsRecord.databaseDictionary)
        try Self.upsert(database, "storage_config", key: "configuration_id", try storageRecord.databaseDictionary)
        let keep = policies.map(\.id)
        let placeholders = keep.map { _ in "?" }.joined(separator: ", ")
        try database.execute("DELETE FROM routing_policies WHERE configuration_id = ?"
                                + (keep.isEmpty ? "" : " AND id NOT IN (\(placeholders))"),
                             [.text(configuration.id)] + keep.map(StoreValue.text))
        for policy in policies {
            try Self.upsert(database, "routing_policies", key: "id", try policy.databaseDictionary)
        }
    }

    // MARK: Rows and records

    /// The rows of `sql` decoded as records.
    static func records<R: StoreRecord>(_ database: some RepositoryConnection, _ sql: String,
                                        _ arguments: [StoreValue]) throws -> [R] {
        let (columns, rows) = try database.fetch(sql, arguments)
        return try rows.map { values in
            var fields: [String: DatabaseValue] = [:]
            for (column, value) in zip(columns, values) { fields[column] = value.databaseValue }
            return try decode(fields, table: R.databaseTableName)
        }
    }

    /// A record from column values, refused as ``RecordRepository/makeRecord(_:fields:)`` refuses.
    static func decode<R: StoreRecord>(_ fields: [String: DatabaseValue], table: String) throws -> R {
        // Words outside a column's allowed ones, named as the repositories name them.
        try RecordRepository<R>().validate(fields.mapValues(StoreValue.init), columns: Array(fields.keys))
        do {
            return try R(row: Row(fields))
        } catch {
            throw StoreError.invalidValue(table: table, column: RecordRepository<R>.column(of: error) ?? "?",
                                          reason: RecordRepository<R>.reason(of: error))
        }
    }

    /// `record` with `fields` changed, checked as a new record is.
    static func merged<R: StoreRecord>(_ record: R, _ fields: [String: DatabaseValue]?, table: String) throws -> R {
        guard let fields else { return record }
        var row = try record.databaseDictionary
        for (name, value) in fields { row[name] = value }
        return try decode(row, table: table)
    }

    /// `INSERT … ON CONFLICT (key) DO UPDATE SET …` of a record's columns.
    static func upsert(_ database: some RepositoryConnection, _ table: String, key: String,
                       _ values: [String: DatabaseValue]) throws {
        let dialect = database.dialect
        let names = values.keys.sorted()
        let columns = names.map(dialect.quote).joined(separator: ", ")
        let updates = names.filter { $0 != key }.map { "\(dialect.quote($0)) = excluded.\(dialect.quote($0))" }
        try database.execute("""
            INSERT INTO \(dialect.quote(table)) (\(columns)) VALUES (\(names.map { _ in "?" }.joined(separator: ", ")))
            ON CONFLICT (\(dialect.quote(key))) DO \(updates.isEmpty ? "NOTHING" : "UPDATE SET " + updates.joined(separator: ", "))
            """, names.map { StoreValue(values[$0]!) })
    }
}
