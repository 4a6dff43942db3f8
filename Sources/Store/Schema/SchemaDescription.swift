// The parts of a built-in migration's schema, written once for both
// engines and rendered for each by its ``SQLDialect``
// (`SQLDialect+Schema`): tables, their columns and constraints, added
// columns and indexes. What cannot be said once (triggers: SQLite's
// trigger bodies, PostgreSQL's PL/pgSQL functions) is a
// ``SchemaStep/perEngine(sqlite:postgresql:)`` step, both texts side by
// side in the migration's file (ARCHITECTURE.md, "PostgreSQL: the
// session", "Names and types").

/// A column's type, as both engines hold it: SQLite's `TEXT`, `INTEGER`
/// and `REAL` are PostgreSQL's `text`, `bigint` (Lua's integers are
/// 64-bit) and `double precision` (not PostgreSQL's 4-byte `real`).
enum SchemaType: Sendable {
    case text
    case integer
    case real
}

/// What a foreign key does when its row goes.
enum ReferentialAction: String, Sendable {
    case cascade = "CASCADE"
    case restrict = "RESTRICT"
}

/// A column's REFERENCES clause.
struct SchemaReference: Sendable {
    var table: String
    var column: String
    var onDelete: ReferentialAction?
    var onUpdate: ReferentialAction?

    init(_ table: String, _ column: String, onDelete: ReferentialAction? = nil, onUpdate: ReferentialAction? = nil) {
        self.table = table
        self.column = column
        self.onDelete = onDelete
        self.onUpdate = onUpdate
    }
}

/// A column's CHECK: an SQL condition both engines read alike (a string
/// literal), or "the column holds JSON", which each engine checks with its
/// own function (SQLite's `json_valid`, PostgreSQL's `opsh_json_valid`:
/// the text is kept as written, so an export is the same document on both).
struct SchemaCheck: Sendable, ExpressibleByStringLiteral {
    enum Condition: Sendable {
        case sql(String)
        case isJSON
    }

    var name: String?
    var condition: Condition

    init(stringLiteral condition: String) {
        self.name = nil
        self.condition = .sql(condition)
    }

    private init(name: String?, condition: Condition) {
        self.name = name
        self.condition = condition
    }

    /// The column holds valid JSON (or NULL, when it may be NULL).
    static func json(named name: String? = nil) -> SchemaCheck {
        SchemaCheck(name: name, condition: .isJSON)
    }
}

/// One column: its name as the schema spells it (PostgreSQL folds it to
/// lower case, ``PostgresNames`` gives it back), its type and constraints.
/// A `default` is an SQL literal both engines read alike. An integer
/// primary key is SQLite's rowid, PostgreSQL's identity column.
struct SchemaColumn: Sendable {
    var name: String
    var type: SchemaType
    var primaryKey: Bool
    var notNull: Bool
    var defaultValue: String?
    var references: SchemaReference?
    var check: SchemaCheck?
    /// Why the column is there, written as an SQL comment before it in
    /// CREATE TABLE (SQLite keeps it in the schema's text).
    var note: String?
    /// What its values mean beyond their type (``ColumnMeaning``): the
    /// shell shows such a column's numbers as dates. Not part of the SQL.
    var meaning: ColumnMeaning?

    /// A REAL column of seconds since 1970 (UTC), shown as a date.
    static func secondsSince1970(_ name: String, notNull: Bool = false, note: String? = nil) -> SchemaColumn {
        var column = SchemaColumn(name, .real, notNull: notNull, note: note)
        column.meaning = .secondsSince1970
        return column
    }

    init(_ name: String, _ type: SchemaType, primaryKey: Bool = false, notNull: Bool = false,
         default defaultValue: String? = nil, references: SchemaReference? = nil, check: SchemaCheck? = nil,
         note: String? = nil) {
        self.name = name
        self.type = type
        self.primaryKey = primaryKey
        self.notNull = notNull
        self.defaultValue = defaultValue
        self.references = references
        self.check = check
        self.note = note
    }
}

/// A table: its columns in order (the order `SELECT *` gives on both
/// engines) and its multi-column UNIQUE constraints.
struct SchemaTable: Sendable {
    var name: String
    var columns: [SchemaColumn]
    var unique: [[String]]

    init(_ name: String, _ columns: [SchemaColumn], unique: [[String]] = []) {
        self.name = name
        self.columns = columns
        self.unique = unique
    }
}

/// An index on columns of one table.
struct SchemaIndex: Sendable {
    var name: String
    var table: String
    var columns: [String]

    init(_ name: String, on table: String, _ columns: [String]) {
        self.name = name
        self.table = table
        self.columns = columns
    }
}
