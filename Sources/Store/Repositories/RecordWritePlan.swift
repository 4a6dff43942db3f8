import Foundation

/// ``RecordTable``'s one-statement insert and update for a row whose
/// fields come as values by column position (the table's columns in
/// schema order) instead of a dictionary: the happy path of a repository
/// write in a `db.transaction` loop, where hashing field names into
/// dictionaries, sorting them and finding the statement's text by its
/// names were most of the layer's own cost (issue 27; BENCHMARKS.md, "The
/// domain layer against hand-written SQL").
///
/// It takes only what ``RecordTable/insert(_:_:spec:)`` and
/// ``RecordTable/update(_:key:fields:spec:)`` would write as it is; for
/// anything else (a required field missing, a word outside a column's
/// allowed ones, a key changed, a DEFAULT to evaluate, a derived field)
/// it says nothing was planned, and the caller runs the general path,
/// whose refusals and messages stay the only ones. So the rules keep one
/// owner: this file only declines.
public final class RecordWritePlans: @unchecked Sendable {
    /// The columns of the spec the plans were made for, and what each
    /// plan needs of them; made again when the spec changes (a migration
    /// added a column).
    private var names: [String] = []
    private var layout: Layout?
    /// Statement texts by the columns written (bit `i`: column `i`) and
    /// the references checked.
    private var texts: [TextKey: String] = [:]
    private let lock = NSLock()

    public init() {}

    /// The spec's column names as UTF-8, for callers that match names in
    /// bytes (a Lua table's keys) without making strings.
    public func utf8Names(_ spec: TableSpec) -> [[UInt8]] {
        lock.lock()
        defer { lock.unlock() }
        if utf8Source != spec.names {
            utf8 = spec.names.map { Array($0.utf8) }
            utf8Source = spec.names
        }
        return utf8
    }
    private var utf8: [[UInt8]] = []
    private var utf8Source: [String] = []

    struct TextKey: Hashable {
        let isUpdate: Bool
        let columns: UInt64
        let references: UInt64
    }

    /// A class, not a struct: a call takes one reference to it, not one
    /// to each of its arrays (their retains and releases showed in a
    /// `db.transaction` loop's profile, issue 27).
    final class Layout {
        let keyIndex: Int
        /// The creation dates' columns (bit `i`: column `i`).
        let dateOnInsert: UInt64
        let dateOnUpdate: [Int]
        let allowed: [(index: Int, words: [String])]
        let json: [Int]
        /// Single-column foreign keys, by the column's position.
        let references: [(index: Int, table: String, key: String)]

        init(keyIndex: Int, dateOnInsert: UInt64, dateOnUpdate: [Int], allowed: [(index: Int, words: [String])],
             json: [Int], references: [(index: Int, table: String, key: String)]) {
            self.keyIndex = keyIndex
            self.dateOnInsert = dateOnInsert
            self.dateOnUpdate = dateOnUpdate
            self.allowed = allowed
            self.json = json
            self.references = references
        }
    }

    /// The layout of `spec` for `Record`, made once per spec.
    func layout<Record: StoreRecord>(_ spec: TableSpec, _: Record.Type) -> Layout? {
        lock.lock()
        defer { lock.unlock() }
        if let layout, names == spec.names { return layout }
        guard spec.columns.count <= 64 else { return nil }
        let index = { (name: String) in spec.names.firstIndex(of: name) }
        guard let keyIndex = index(Record.primaryKeyColumns[0]) else { return nil }
        var allowed: [(Int, [String])] = []
        for (column, words) in Record.allowedValues.sorted(by: { $0.key < $1.key }) {
            if let position = index(column) { allowed.append((position, words)) }
        }
        let made = Layout(
            keyIndex: keyIndex,
            dateOnInsert: spec.names.indices.reduce(0) { mask, index in
                RecordTable<Record>.dateColumnsSetOnInsert.contains(spec.names[index]) ? mask | 1 << index : mask
            },
            dateOnUpdate: RecordTable<Record>.dateColumnsOrderedOnUpdate.compactMap(index),
            allowed: allowed,
            json: Record.jsonColumns.compactMap(index),
            references: spec.references.compactMap { reference in index(reference.column).map { ($0, reference.table, reference.key) } })
        names = spec.names
        layout = made
        texts.removeAll()
        lastText = nil
        return made
    }

    func text(_ key: TextKey, make: () -> String) -> String {
        lock.lock()
        defer { lock.unlock() }
        // A loop writes the same columns call after call: the last text
        // is found without hashing its key.
        if let lastText, lastText.key == key { return lastText.text }
        let text: String
        if let known = texts[key] {
            text = known
        } else {
            text = make()
            texts[key] = text
        }
        lastText = (key, text)
        return text
    }
    private var lastText: (key: TextKey, text: String)?
}

/// One planned statement (``RecordTable/plannedInsert(_:spec:dialect:plans:)``,
/// ``RecordTable/plannedUpdate(key:_:spec:dialect:plans:)``).
public struct PlannedWrite {
    public let sql: String
    /// The row's key, when known before the write (nil: the rowid).
    let key: StoreValue?
    /// Written only where the rows it refers to exist (`WHERE EXISTS`).
    let checksReferences: Bool
    let isUpdate: Bool
    /// The values by column position, and the columns' names: the fields
    /// by name are made only to name a refusal (``fields``).
    let values: [StoreValue?]
    let names: [String]
    /// The layout it was planned with, and the references it checks (bit
    /// `i`: column `i`): the values after the columns' (``forEachArgument(_:)``).
    let layout: RecordWritePlans.Layout
    let references: UInt64

    /// The statement's values in order: the columns written, the key of
    /// an update, then each referenced row's key. Made from ``values``
    /// as they are bound, not kept as an array of their own: building and
    /// tearing down that array was a share of a repository write in a
    /// `db.transaction` loop (issue 27).
    public func forEachArgument(_ body: (StoreValue) -> Void) {
        for case let value? in values { body(value) }
        if isUpdate, let key { body(key) }
        for reference in layout.references where references & (1 << reference.index) != 0 {
            body(values[reference.index]!)
        }
    }

    /// Where an update's key is among ``forEachArgument(_:)``'s values
    /// (0: the first); nil for an insert.
    public var keyPosition: Int? {
        guard isUpdate else { return nil }
        return values.reduce(0) { $1 == nil ? $0 : $0 + 1 }
    }

    /// At least as many values as ``forEachArgument(_:)`` gives.
    public var argumentCapacity: Int { values.count + 1 + layout.references.count }

    /// ``forEachArgument(_:)``'s values as an array (Store's own run).
    public var arguments: [StoreValue] {
        var arguments: [StoreValue] = []
        arguments.reserveCapacity(argumentCapacity)
        forEachArgument { arguments.append($0) }
        return arguments
    }

    /// The row's key once the caller stepped ``sql`` with ``arguments``
    /// itself (the row path's C write) and it changed `changes` rows,
    /// `rowid` the connection's last inserted rowid: what
    /// ``RecordTable/run(_:_:spec:)`` returns. Nil when it wrote nothing
    /// where it must write a row (a referenced row missing, no row with
    /// the key): ``RecordTable/run(_:_:spec:)`` then says why.
    public func key(changes: Int, rowid: Int64) -> StoreValue? {
        if isUpdate || checksReferences { return changes > 0 ? key ?? .null : nil }
        return key ?? .integer(rowid)
    }

    var fields: [String: StoreValue] {
        var fields: [String: StoreValue] = [:]
        for (index, value) in values.enumerated() { if let value { fields[names[index]] = value } }
        return fields
    }
}

extension RecordTable {
    /// The INSERT ``insert(_:_:spec:)`` would run for `values` (by column
    /// position; nil: not given), or nil when the general path must run.
    public func plannedInsert(_ values: consuming [StoreValue?], spec: TableSpec, dialect: SQLDialect,
                              plans: RecordWritePlans) -> PlannedWrite? {
        guard !derives, values.count == spec.columns.count, let layout = plans.layout(spec, Record.self) else { return nil }
        var now: Double?
        // As ``insertedFields(_:_:spec:evaluatingDefaults:)`` fills them.
        for (index, column) in spec.columns.enumerated() where values[index] == nil {
            if column.isPrimaryKey {
                if column.kind == .integer { continue }
                if generatedKey { values[index] = .text(makeIdentifier()); continue }
            }
            if layout.dateOnInsert & (1 << index) != 0 {
                if now == nil { now = Date().timeIntervalSince1970 }
                values[index] = .real(now!)
            } else if column.defaultSQL != nil {
                // A key's DEFAULT is evaluated: the general path's.
                if column.isPrimaryKey { return nil }
            } else if column.notNull {
                // A required field missing is named by the general path.
                return nil
            }
        }
        guard Self.acceptable(values, layout) else { return nil }
        // The key as given (a NULL one too: the caller gets what the
        // general path returns), nil for the rowid.
        let key = values[layout.keyIndex]
        let (columns, references) = Self.masks(values, layout)
        // A reference without a known key: checked first, by the general path.
        guard references == 0 || (key != nil && key != .null) else { return nil }
        let sql = plans.text(.init(isUpdate: false, columns: columns, references: references)) {
            let names = Self.names(columns, spec)
            let head = "INSERT INTO \(dialect.quote(table)) (\(names.map(dialect.quote).joined(separator: ", "))) "
            let marks = Array(repeating: "?", count: names.count).joined(separator: ", ")
            guard references != 0 else { return head + "VALUES (\(marks))" }
            return head + "SELECT \(marks)" + Self.existing(references, layout, dialect, joinedBy: " WHERE ")
        }
        return PlannedWrite(sql: sql, key: key, checksReferences: references != 0, isUpdate: false,
                            values: values, names: spec.names, layout: layout, references: references)
    }

    /// The UPDATE ``update(_:key:fields:spec:)`` would run for `values`,
    /// or nil when the general path must run.
    public func plannedUpdate(key: StoreValue, _ values: consuming [StoreValue?], spec: TableSpec, dialect: SQLDialect,
                              plans: RecordWritePlans) -> PlannedWrite? {
        guard values.count == spec.columns.count, let layout = plans.layout(spec, Record.self) else { return nil }
        if let newKey = values[layout.keyIndex] {
            // Changing the key is refused by the general path.
            guard newKey == key else { return nil }
            values[layout.keyIndex] = nil
        }
        let now = Date().timeIntervalSince1970
        for index in layout.dateOnUpdate where values[index] == nil { values[index] = .real(now) }
        guard Self.acceptable(values, layout) else { return nil }
        let (columns, references) = Self.masks(values, layout)
        guard columns != 0 else { return nil }
        let keyColumn = self.keyColumn
        let sql = plans.text(.init(isUpdate: true, columns: columns, references: references)) {
            let assignments = Self.names(columns, spec).map { dialect.quote($0) + " = ?" }.joined(separator: ", ")
            return "UPDATE \(dialect.quote(table)) SET \(assignments) WHERE \(dialect.quote(keyColumn)) = ?"
                + Self.existing(references, layout, dialect, joinedBy: " AND ")
        }
        return PlannedWrite(sql: sql, key: key, checksReferences: references != 0, isUpdate: true,
                            values: values, names: spec.names, layout: layout, references: references)
    }

    /// Runs a planned write as the caller's one statement and returns the
    /// row's key. When it wrote nothing (a referenced row missing, no row
    /// with the key), the general path runs with the same fields and says
    /// why; a refusal is named as the general path names it.
    public func run(_ planned: PlannedWrite, _ database: some RepositoryConnection, spec: TableSpec) throws -> StoreValue {
        do {
            if planned.isUpdate || planned.checksReferences {
                if try database.execute(planned.sql, planned.arguments) > 0 { return planned.key ?? .null }
            } else {
                let rowid = try database.insert(planned.sql, planned.arguments, keyColumn: keyColumn)
                return planned.key ?? rowid.map(StoreValue.integer) ?? .null
            }
        } catch {
            throw records.explanation(of: error, database, planned.fields)
        }
        if planned.isUpdate, let key = planned.key {
            try update(database, key: key, fields: planned.fields, spec: spec)
            return key
        }
        return try insert(database, planned.fields, spec: spec)
    }

    /// What ``RecordRepository/validate(_:columns:)`` and the JSON check
    /// before a write accept: each word one of its column's, no NUL in
    /// JSON text.
    private static func acceptable(_ values: [StoreValue?], _ layout: RecordWritePlans.Layout) -> Bool {
        for (index, words) in layout.allowed {
            switch values[index] {
            case nil, .null?: continue
            case let .text(text)? where words.contains(text): continue
            default: return false
            }
        }
        for index in layout.json {
            if case let .text(text)? = values[index], text.utf8.contains(0) { return false }
        }
        return true
    }

    /// The columns given (bit `i`: column `i`), and the references among
    /// them that name a row.
    private static func masks(_ values: [StoreValue?], _ layout: RecordWritePlans.Layout) -> (UInt64, UInt64) {
        var columns: UInt64 = 0
        for (index, value) in values.enumerated() where value != nil { columns |= 1 << index }
        var references: UInt64 = 0
        for reference in layout.references {
            if let value = values[reference.index], value != .null { references |= 1 << reference.index }
        }
        return (columns, references)
    }

    private static func names(_ mask: UInt64, _ spec: TableSpec) -> [String] {
        spec.names.indices.filter { mask & (1 << $0) != 0 }.map { spec.names[$0] }
    }

    private static func existing(_ mask: UInt64, _ layout: RecordWritePlans.Layout, _ dialect: SQLDialect,
                                 joinedBy lead: String) -> String {
        let terms = layout.references.filter { mask & (1 << $0.index) != 0 }.map {
            "EXISTS (SELECT 1 FROM \(dialect.quote($0.table)) WHERE \(dialect.quote($0.key)) = ?)"
        }
        return terms.isEmpty ? "" : lead + terms.joined(separator: " AND ")
    }
}
