import PostgresWire

/// PostgreSQL's schema at the start of a transaction, to say at its end
/// what the transaction changed (SQLite's `SchemaSnapshot`): the tables,
/// views, indexes, triggers and functions (procedures too) outside the
/// system schemas (temporary ones go with the session). Taken only where a
/// limit or a question needs it (a shell chunk, a `--max-changes` run, a dry
/// run), and compared only when the transaction wrote the server's catalog
/// (``catalogWrites``: the server's counters, so a `DO` block or a
/// function's `EXECUTE` is seen as a statement of its own is) or a
/// statement's command tag said it changed the schema.
///
/// A table's or index's version is its catalog row and columns as the
/// schema sees them (name, owner, privileges, options, columns and their
/// types), not the row itself: TRUNCATE writes a new row (a new file for
/// the table) and changes no schema. A trigger's or function's version is
/// its catalog row's `xmin`, which any change to it rewrites.
struct PostgresSchemaSnapshot {
    private struct Object: Equatable {
        let type: String
        let name: String
        let table: String
        let version: String
        /// A table's file (`pg_relation_filenode`): TRUNCATE gives it a new
        /// one.
        let file: String
    }

    private let objects: [Int64: Object]
    /// The tables the transaction's TRUNCATEs noted so far (their rows are
    /// in the counters: ``CommitTally``).
    private let noted: Set<Int64>
    /// The rows this backend wrote in `pg_catalog`'s tables so far
    /// (``catalogWrites(on:)``) when the snapshot was taken.
    let catalogWrites: Int64

    /// Every name qualified (functions, operators, types): the snapshot is
    /// read after a script's statements, with the search_path they left
    /// (28f).
    static let query = """
        SELECT c.oid::pg_catalog.int8, c.relkind::pg_catalog.text, c.relname::pg_catalog.text,
               COALESCE(owner.relname, c.relname)::pg_catalog.text,
               pg_catalog.md5(pg_catalog.concat_ws('|', c.relname, c.relnamespace, c.reltype, c.relowner, c.relam, c.relacl, c.reloptions,
                             c.relpersistence, c.relnatts, c.relchecks, c.relhasrules, c.relhastriggers, c.relrowsecurity,
                             c.relforcerowsecurity, c.relispartition, c.relreplident,
                             (SELECT pg_catalog.string_agg(pg_catalog.concat_ws(':', a.attnum, a.attname, a.atttypid, a.atttypmod,
                                                          a.attnotnull, a.attisdropped, a.atthasdef, a.attidentity, a.attgenerated), ','
                                                ORDER BY a.attnum)
                              FROM pg_catalog.pg_attribute a
                              WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0))),
               COALESCE(pg_catalog.pg_relation_filenode(c.oid)::pg_catalog.text, '')
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
        LEFT JOIN pg_catalog.pg_index x ON x.indexrelid OPERATOR(pg_catalog.=) c.oid
        LEFT JOIN pg_catalog.pg_class owner ON owner.oid OPERATOR(pg_catalog.=) x.indrelid
        WHERE c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,v,m,i,f}'::pg_catalog."char"[])
          AND \(userSchema("n.nspname")) AND n.nspname OPERATOR(pg_catalog.!~) '^pg_toast'
        UNION ALL
        SELECT (OPERATOR(pg_catalog.-) t.oid::pg_catalog.int8), 'T', t.tgname::pg_catalog.text, c.relname::pg_catalog.text,
               t.xmin::pg_catalog.text, ''
        FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
        WHERE NOT t.tgisinternal AND \(userSchema("n.nspname"))
        UNION ALL
        SELECT (OPERATOR(pg_catalog.-) (p.oid::pg_catalog.int8 OPERATOR(pg_catalog.+) 4294967296)),
               pg_catalog.concat('F', p.prokind), p.proname::pg_catalog.text, p.proname::pg_catalog.text, p.xmin::pg_catalog.text, ''
        FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
        WHERE \(userSchema("n.nspname"))
        UNION ALL
        SELECT 0, 'C', '', '', (\(catalogWritesQuery))::pg_catalog.text, ''
        UNION ALL
        SELECT 0, 'N', '', '', COALESCE(pg_catalog.current_setting('opsh.truncated', true), ''), ''
        """

    /// `schema` is not a system schema nor a session's temporary one.
    private static func userSchema(_ schema: String) -> String {
        "\(schema) OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema}'::pg_catalog.name[]) AND \(schema) OPERATOR(pg_catalog.!~) '^pg_temp_'"
    }

    /// The rows this backend's open transaction (and its earlier ones not
    /// yet flushed to the shared statistics) wrote in the server's catalog:
    /// every schema change writes it, and no flush happens inside a
    /// transaction, so two readings in one differ exactly when it wrote
    /// the catalog in between.
    static let catalogWritesQuery = """
        SELECT COALESCE(pg_catalog.sum(pg_catalog.pg_stat_get_xact_tuples_inserted(c.oid)
                                       OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_updated(c.oid)
                                       OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_deleted(c.oid)), 0)::pg_catalog.int8
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace AND c.relkind OPERATOR(pg_catalog.=) 'r'
        """

    static func catalogWrites(on connection: PostgresConnection) throws -> Int64 {
        if case let .integer(count)? = try connection.query(catalogWritesQuery).scalar { return count }
        return 0
    }

    init(_ connection: PostgresConnection) throws {
        var objects: [Int64: Object] = [:]
        var catalogWrites: Int64 = 0
        var noted: Set<Int64> = []
        for row in try connection.query(Self.query).rows {
            guard case let .integer(oid) = row[0], case let .text(kind) = row[1], case let .text(name) = row[2],
                  case let .text(table) = row[3], case let .text(version) = row[4], case let .text(file) = row[5] else { continue }
            if kind == "C" {
                catalogWrites = Int64(version) ?? 0
                continue
            }
            if kind == "N" {
                // "oid:rows,…" (CommitTally.truncateNotes)
                noted = Set(version.split(separator: ",").compactMap { $0.split(separator: ":").first.flatMap { Int64($0) } })
                continue
            }
            let type = switch kind {
            case "v", "m": "view"
            case "i": "index"
            case "T": "trigger"
            case "Fp": "procedure"
            case "Fa": "aggregate"
            case "Ff", "Fw": "function"
            default: "table"
            }
            objects[oid] = Object(type: type, name: PostgresNames.rowKey(name), table: PostgresNames.rowKey(table), version: version,
                                  file: kind == "r" ? file : "")
        }
        self.objects = objects
        self.catalogWrites = catalogWrites
        self.noted = noted
    }

    /// What changed from `self` to `now`: dropped, created and altered
    /// objects, tables first, then what belongs to a table (the shell's
    /// question asks for the first one's table), then functions, each by
    /// name; an index or trigger dropped with its table goes without
    /// saying, as on SQLite.
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
        let droppedTables = Set(changes.filter { $0.kind == .dropped && $0.type == "table" }.map(\.name))
        return changes
            .filter { !($0.kind == .dropped && $0.type != "table" && droppedTables.contains($0.table)) }
            .sorted { (Self.rank($0.type), $0.name, $0.type) < (Self.rank($1.type), $1.name, $1.type) }
    }

    private static func rank(_ type: String) -> Int {
        switch type {
        case "table": 0
        case "function", "procedure", "aggregate": 2
        default: 1
        }
    }

    /// The tables of `self` that `now` has in a new file and whose rows no
    /// note counted: emptied by a TRUNCATE the counters do not see (a table
    /// opsh did not make has no trigger to note it; a script can erase the
    /// note: scripts/reliability-attacks.md, 28o, 28p). Their rows are
    /// counted as a dropped table's are.
    func emptiedTables(to now: PostgresSchemaSnapshot) -> [(oid: Int64, name: String)] {
        objects.filter { oid, object in
            guard !object.file.isEmpty, let after = now.objects[oid], !after.file.isEmpty else { return false }
            return after.file != object.file && !now.noted.contains(oid)
        }
        .map { ($0.key, $0.value.name) }
        .sorted { $0.name < $1.name }
    }

    /// The tables of `self` that `now` no longer has: their oids and names.
    func droppedTables(to now: PostgresSchemaSnapshot) -> [(oid: Int64, name: String)] {
        objects.filter { $0.value.type == "table" && $0.key > 0 && now.objects[$0.key] == nil }
            .map { ($0.key, $0.value.name) }
            .sorted { $0.name < $1.name }
    }
}
