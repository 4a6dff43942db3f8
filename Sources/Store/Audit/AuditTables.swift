extension AuditTrail {
    /// The trail's tables as opsh's own statements name them: with their
    /// schema, so that nothing a script made on its connection (a TEMP
    /// table of the same name, a `search_path`) stands in for them.
    /// SQLite: `main.opsh_audit`. PostgreSQL: the schema holding opsh's
    /// tables, `"public".opsh_audit`.
    public struct Tables: Sendable, Equatable {
        /// The schema, as written into SQL (`main`, `"public"`).
        public let schema: String
        public var audit: String { schema + ".opsh_audit" }
        var prune: String { schema + ".opsh_audit_prune" }
        var cut: String { schema + ".opsh_audit_cut" }
        var settings: String { schema + ".opsh_settings" }
        var configuration: String { schema + ".configuration" }
    }

    /// Where the trail is on `db`; nil when the database has none
    /// (migration 003 pending).
    ///
    /// On PostgreSQL the schema is the first one in the `search_path` the
    /// connection began with (`pg_settings.reset_val`: the server's, the
    /// database's and the role's setting, not what a script `SET` since)
    /// that has an `opsh_audit` table. Temporary schemas are never it.
    public static func tables(_ db: some RepositoryConnection) throws -> Tables? {
        switch db.dialect {
        case .sqlite:
            let found = try db.value("SELECT count(*) FROM main.sqlite_master WHERE type = 'table' AND name = 'opsh_audit'")
            return found == .integer(1) ? Tables(schema: "main") : nil
        case .postgresql:
            // One round trip: the schemas holding an opsh_audit table, each
            // with the search_path the connection began with and its user.
            let rows = try db.fetch("""
                SELECT (SELECT reset_val FROM pg_catalog.pg_settings WHERE name = 'search_path'), session_user, n.nspname
                FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                WHERE c.relname = 'opsh_audit' AND c.relkind IN ('r', 'p') AND n.nspname !~ '^pg_temp_'
                """, []).rows
            guard let first = rows.first else { return nil }
            let holding = Set(rows.compactMap { $0[2].textValue })
            let searchPath = first[0].textValue ?? "\"$user\", public"
            let schema = schemas(inSearchPath: searchPath, user: first[1].textValue ?? "").first { holding.contains($0) }
            return schema.map { Tables(schema: quoteIdentifier($0)) }
        }
    }

    /// The schema names a `search_path` setting lists, in order: quoted
    /// names unquoted, `$user` as `user`.
    static func schemas(inSearchPath text: String, user: String) -> [String] {
        var names: [String] = []
        var current = ""
        var quoted = false
        var wasQuoted = false
        var characters = Array(text)[...]
        func finish() {
            let name = wasQuoted ? current : current.trimmingCharacters(in: .whitespaces).lowercased()
            if !name.isEmpty { names.append(name == "$user" ? user : name) }
            current = ""
            wasQuoted = false
        }
        while let character = characters.popFirst() {
            if quoted {
                if character == "\"" {
                    if characters.first == "\"" { current.append("\""); characters.removeFirst() } else { quoted = false }
                } else {
                    current.append(character)
                }
            } else if character == "\"" {
                quoted = true
                wasQuoted = true
                current = ""
            } else if character == "," {
                finish()
            } else if !wasQuoted {
                current.append(character)
            }
        }
        finish()
        return names
    }
}

/// An audit row as written: its id and, on a chained trail, its hash and
/// the hash it follows.
public struct AuditRowStamp: Sendable, Equatable {
    public var id: Int64
    public var hash: String?
    public var previousHash: String?

    public init(id: Int64, hash: String?, previousHash: String?) {
        self.id = id
        self.hash = hash
        self.previousHash = previousHash
    }
}

/// What writing or reading the trail refuses.
public enum AuditTrailError: Error, Equatable, CustomStringConvertible {
    /// The database has no trail (migration 003 pending).
    case missing
    /// The row was inserted, but reading it back did not find it as
    /// written: something in the database dropped or changed it.
    case didNotLand(String)
    /// The SQLite file at the path is not the one the session opened.
    case replacedFile(String)

    public var description: String {
        switch self {
        case .missing:
            "this database has no audit trail yet (migration \(AuditTrail.migration) is pending): run `opsh migrate`"
        case let .didNotLand(table):
            "the row did not land in \(table): reading it back after the insert did not find it as written (something in the database, such as a trigger on the trail, dropped or changed it)"
        case let .replacedFile(path):
            "the database file \(path) is not the one this session opened (it was replaced or deleted): the row is not written into another file"
        }
    }
}

extension StoreDatabase {
    /// Runs `body` in a savepoint: kept when it returns, rolled back when
    /// it throws (a shell chunk's audit row, written in its transaction).
    public func inSavepoint<T>(_ body: () throws -> T) throws -> T {
        var result: T?
        try db.inSavepoint {
            result = try body()
            return .commit
        }
        return result!
    }
}
