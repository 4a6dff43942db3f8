import PostgresWire

/// PostgreSQL's schema at the start of a transaction, to say at its end
/// what the transaction changed (SQLite's `SchemaSnapshot`): the tables,
/// views, indexes and triggers outside the system schemas (temporary ones
/// go with the session), each with the `xmin` of its catalog row, which a
/// transaction that alters the object (`ALTER TABLE … ADD COLUMN`, a
/// rename) rewrites. Taken only where a limit or a question needs it (a
/// shell chunk, a `--max-changes` run, a dry run), and compared only when
/// a statement of the transaction reported a schema change (its command
/// tag: the server's word for what ran).
struct PostgresSchemaSnapshot {
    private struct Object: Equatable {
        let type: String
        let name: String
        let table: String
        let version: String
    }

    private let objects: [Int64: Object]

    static let query = """
        SELECT c.oid::bigint, c.relkind::text, c.relname::text, coalesce(owner.relname, c.relname)::text, c.xmin::text
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_catalog.pg_index x ON x.indexrelid = c.oid
        LEFT JOIN pg_catalog.pg_class owner ON owner.oid = x.indrelid
        WHERE c.relkind IN ('r', 'p', 'v', 'm', 'i', 'f')
          AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_toast' AND n.nspname !~ '^pg_temp_'
        UNION ALL
        SELECT -t.oid::bigint, 'T', t.tgname::text, c.relname::text, t.xmin::text
        FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE NOT t.tgisinternal
          AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_temp_'
        """

    init(_ connection: PostgresConnection) throws {
        var objects: [Int64: Object] = [:]
        for row in try connection.query(Self.query).rows {
            guard case let .integer(oid) = row[0], case let .text(kind) = row[1], case let .text(name) = row[2],
                  case let .text(table) = row[3], case let .text(version) = row[4] else { continue }
            let type = switch kind {
            case "v", "m": "view"
            case "i": "index"
            case "T": "trigger"
            default: "table"
            }
            objects[oid] = Object(type: type, name: PostgresNames.rowKey(name), table: PostgresNames.rowKey(table), version: version)
        }
        self.objects = objects
    }

    /// What changed from `self` to `now`: dropped, created and altered
    /// objects, tables first.
    func changes(to now: PostgresSchemaSnapshot) -> [SchemaChange] {
        var changes: [SchemaChange] = []
        for (oid, object) in objects where now.objects[oid] == nil {
            changes.append(SchemaChange(kind: .dropped, type: object.type, name: object.name, table: object.table))
        }
        for (oid, object) in now.objects {
            guard let before = objects[oid] else {
                changes.append(SchemaChange(kind: .created, type: object.type, name: object.name, table: object.table))
                continue
            }
            if before.version != object.version || before.name != object.name {
                changes.append(SchemaChange(kind: .altered, type: object.type, name: object.name, table: object.table))
            }
        }
        return changes.sorted { ($0.type == "table" ? 0 : 1, $0.name) < ($1.type == "table" ? 0 : 1, $1.name) }
    }
}
