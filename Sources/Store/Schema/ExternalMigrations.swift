import Foundation
import GRDB

/// A migration defined outside the core (in Lua, by the Bindings layer),
/// applied after the built-in ones and recorded in the same
/// `grdb_migrations` table under ``identifier`` (`lua:` + ``name``).
public struct ExternalMigration: Sendable {
    /// The id as its author wrote it, e.g. `003_add_owner`.
    public var name: String
    /// A digest of the migration's source: an applied migration whose
    /// source changed is refused.
    public var checksum: String
    /// Where it comes from (a file path), for messages.
    public var source: String
    /// Runs inside the migration's transaction: on SQLite with the
    /// migrator's connection (the session's calls must run on it); nil on
    /// PostgreSQL, whose session connection is the one migrating.
    public var migrate: @Sendable (StoreDatabase?) throws -> Void

    public init(name: String, checksum: String, source: String, migrate: @escaping @Sendable (StoreDatabase?) throws -> Void) {
        self.name = name
        self.checksum = checksum
        self.source = source
        self.migrate = migrate
    }

    /// The identifier in `grdb_migrations`.
    public var identifier: String { ExternalMigrations.prefix + name }
}

/// A refusal to migrate: GRDB's `DatabaseMigrator` traps on duplicate
/// identifiers and on a target older than what is applied, so everything
/// is validated here first and refused with a message.
public struct ExternalMigrationError: Error, CustomStringConvertible, Sendable, Equatable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Built-in plus external migrations: status, validation, application.
///
/// Each applied external migration also leaves a row in
/// `opsh_lua_migrations(identifier, checksum, applied_at)` (created by the
/// first one), written in the migration's own transaction.
public enum ExternalMigrations {
    /// Identifiers of external migrations start with it (see
    /// `Store.isLuaMigration`).
    public static let prefix = "lua:"
    public static let checksumTable = "opsh_lua_migrations"

    /// One migration as `status` reports it.
    public struct Status: Sendable, Equatable {
        public enum State: String, Sendable {
            case applied, pending
            /// Applied, but its source changed since.
            case changed
            /// Applied, but no longer among the given migrations.
            case missing
        }
        /// The built-in identifier, or the external migration's name.
        public var name: String
        public var isBuiltIn: Bool
        public var state: State
        public var source: String?
        public var appliedAt: Double?
    }

    /// A checksum of a migration's source bytes (FNV-1a, 64 bits, and the
    /// length): it detects edits, it is not a defence against forgery.
    public static func checksum(_ bytes: some Sequence<UInt8>) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        var count = 0
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
            count += 1
        }
        let hex = String(hash, radix: 16)
        return "fnv1a64:" + String(repeating: "0", count: 16 - hex.count) + hex + ":\(count)"
    }

    /// Applied identifiers, in the order they were applied.
    static func appliedIdentifiers(_ db: Database) throws -> [String] {
        try appliedIdentifiers(StoreDatabase(db))
    }

    /// Applied identifiers, in the order they were applied (SQLite's
    /// `grdb_migrations`, PostgreSQL's `opsh_migrations`).
    public static func appliedIdentifiers(_ database: some RepositoryConnection) throws -> [String] {
        let sql: String
        switch database.dialect {
        case .sqlite:
            guard try tableExists(database, "grdb_migrations") else { return [] }
            sql = "SELECT identifier FROM grdb_migrations ORDER BY rowid"
        case .postgresql:
            guard try tableExists(database, "opsh_migrations") else { return [] }
            sql = "SELECT identifier FROM opsh_migrations ORDER BY applied_at, identifier"
        }
        return try database.fetch(sql, []).rows.compactMap { $0.first?.textValue }
    }

    static func tableExists(_ database: some RepositoryConnection, _ table: String) throws -> Bool {
        switch database.dialect {
        case .sqlite: try database.value("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(table)]) == .integer(1)
        case .postgresql: try database.value("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?", [.text(table)]) == .integer(1)
        }
    }

    /// Recorded checksums and dates of applied external migrations, by identifier.
    static func records(_ database: some RepositoryConnection) throws -> [String: (checksum: String, appliedAt: Double)] {
        guard try tableExists(database, checksumTable) else { return [:] }
        var result: [String: (checksum: String, appliedAt: Double)] = [:]
        for row in try database.fetch("SELECT identifier, checksum, applied_at FROM \(checksumTable)", []).rows {
            guard let identifier = row[0].textValue, let checksum = row[1].textValue else { continue }
            let appliedAt: Double
            switch row[2] {
            case let .real(value): appliedAt = value
            case let .integer(value): appliedAt = Double(value)
            default: appliedAt = 0
            }
            result[identifier] = (checksum, appliedAt)
        }
        return result
    }

    /// Every built-in migration, then every external one (given or
    /// applied), with its state.
    public static func status(_ db: some RepositoryConnection, external: [ExternalMigration]) throws -> [Status] {
        let applied = Set(try appliedIdentifiers(db))
        let records = try records(db)
        var result = StoreMigrations.builtInIdentifiers.map { id in
            Status(name: id, isBuiltIn: true, state: applied.contains(id) ? .applied : .pending)
        }
        let given = Dictionary(external.map { ($0.identifier, $0) }, uniquingKeysWith: { first, _ in first })
        let names = Set(given.keys).union(applied.filter { $0.hasPrefix(prefix) })
        for identifier in names.sorted() {
            let name = String(identifier.dropFirst(prefix.count))
            let record = records[identifier]
            let state: Status.State
            switch (applied.contains(identifier), given[identifier]) {
            case (false, _): state = .pending
            case (true, nil): state = .missing
            case (true, let migration?): state = record?.checksum == migration.checksum ? .applied : .changed
            }
            result.append(Status(name: name, isBuiltIn: false, state: state,
                                 source: given[identifier]?.source, appliedAt: record?.appliedAt))
        }
        return result
    }

    /// Checks `external` against the database and `target`, and returns the
    /// identifiers that `migrate` would apply, in order. Throws an
    /// ``ExternalMigrationError`` instead of letting GRDB trap.
    ///
    /// - parameter target: a built-in identifier, an external name, or an
    ///   external identifier (`lua:name`); nil for everything.
    public static func plan(_ db: some RepositoryConnection, external: [ExternalMigration], upTo target: String?) throws -> [String] {
        let builtIn = StoreMigrations.builtInIdentifiers
        // Duplicates and bad names.
        var seen: [String: String] = [:]
        for migration in external {
            guard !migration.name.isEmpty, migration.name.allSatisfy(isNameCharacter) else {
                throw ExternalMigrationError("bad migration id '\(migration.name)' in \(migration.source): use letters, digits, '_', '-' and '.'")
            }
            if let other = seen[migration.name] {
                throw ExternalMigrationError("migration id '\(migration.name)' is used twice: \(other) and \(migration.source)")
            }
            seen[migration.name] = migration.source
        }
        let ordered = external.sorted { $0.name < $1.name }
        let all = builtIn + ordered.map(\.identifier)
        let applied = try appliedIdentifiers(db)
        let appliedSet = Set(applied)
        let records = try records(db)

        // Applied external migrations must still be there, unchanged.
        let given = Set(ordered.map(\.identifier))
        for identifier in applied where identifier.hasPrefix(prefix) && !given.contains(identifier) {
            throw ExternalMigrationError("migration '\(identifier.dropFirst(prefix.count))' is applied but has no file among the migrations (was it renamed or deleted?)")
        }
        for migration in ordered where appliedSet.contains(migration.identifier) {
            guard let record = records[migration.identifier] else {
                throw ExternalMigrationError("migration '\(migration.name)' is applied but has no recorded checksum in \(checksumTable)")
            }
            if record.checksum != migration.checksum {
                throw ExternalMigrationError("migration '\(migration.name)' was applied, and \(migration.source) has changed since: an applied migration must not change (add a new one)")
            }
        }
        // No new migration may sort before an applied one.
        if let lastApplied = all.lastIndex(where: appliedSet.contains) {
            if let early = all[..<lastApplied].first(where: { !appliedSet.contains($0) }) {
                throw ExternalMigrationError("migration '\(display(early))' is pending but sorts before '\(display(all[lastApplied]))', which is applied: give it an id that sorts after")
            }
        }
        // The target.
        var end = all.count
        if let target {
            let resolved = builtIn.contains(target) ? target
                : target.hasPrefix(prefix) ? target : prefix + target
            guard let index = all.firstIndex(of: resolved) else {
                let known = all.map(display).joined(separator: ", ")
                throw ExternalMigrationError("unknown migration '\(target)' (known: \(known))")
            }
            if let lastApplied = all.lastIndex(where: appliedSet.contains), index < lastApplied {
                throw ExternalMigrationError("migration '\(display(resolved))' is older than '\(display(all[lastApplied]))', which is applied: migrations only go up")
            }
            end = index + 1
        }
        return all[..<end].filter { !appliedSet.contains($0) }
    }

    /// Applies the pending migrations up to `target` (nil: all), each in
    /// its own transaction; returns the identifiers applied. Stops at the
    /// first failure, which rolls back that migration only.
    @discardableResult
    public static func migrate(_ writer: any DatabaseWriter, external: [ExternalMigration], upTo target: String?) throws -> [String] {
        let pending = try writer.read { db in try plan(StoreDatabase(db), external: external, upTo: target) }
        guard let last = pending.last else { return [] }
        var migrator = StoreMigrations.makeMigrator()
        for migration in external.sorted(by: { $0.name < $1.name }) {
            let identifier = migration.identifier
            let checksum = migration.checksum
            let body = migration.migrate
            migrator.registerMigration(identifier) { db in
                try body(StoreDatabase(db))
                try db.execute(sql: """
                    CREATE TABLE IF NOT EXISTS \(checksumTable) (
                      identifier TEXT NOT NULL PRIMARY KEY,
                      checksum TEXT NOT NULL,
                      applied_at REAL NOT NULL)
                    """)
                try db.execute(
                    sql: "INSERT OR REPLACE INTO \(checksumTable) (identifier, checksum, applied_at) VALUES (?, ?, ?)",
                    arguments: [identifier, checksum, Date().timeIntervalSince1970])
            }
        }
        do {
            try migrator.migrate(writer, upTo: last)
        } catch let error as DatabaseError {
            // E.g. the foreign key check at the end of a migration: name it.
            let applied = Set((try? writer.read { db in try appliedIdentifiers(StoreDatabase(db)) }) ?? [])
            let failed = pending.first { !applied.contains($0) }.map(display) ?? last
            throw ExternalMigrationError("migration '\(failed)' failed and was rolled back: \(error.message ?? "\(error.resultCode)")")
        }
        return pending
    }

    /// A name as messages show it: external ones without their prefix.
    static func display(_ identifier: String) -> String {
        identifier.hasPrefix(prefix) ? String(identifier.dropFirst(prefix.count)) : identifier
    }

    static func isNameCharacter(_ character: Character) -> Bool {
        guard let ascii = character.asciiValue else { return false }
        return (ascii >= 48 && ascii <= 57) || (ascii >= 65 && ascii <= 90) || (ascii >= 97 && ascii <= 122)
            || ascii == 95 || ascii == 45 || ascii == 46
    }
}
