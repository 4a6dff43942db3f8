import Foundation
import Synchronization

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
public final class RecordWritePlans: Sendable {
    private struct Cache {
        /// The columns of the spec the plans were made for, and what each
        /// plan needs of them; made again when the spec changes (a
        /// migration added a column).
        var names: [String] = []
        var layout: Layout?
        /// Statement texts by the columns written (bit `i`: column `i`)
        /// and the references checked.
        var texts: [TextKey: String] = [:]
        /// A loop writes the same columns call after call: the last text
        /// is found without hashing its key.
        var lastText: (key: TextKey, text: String)?
    }
    /// A `Mutex`, not an `NSLock`: taken twice a planned write, the
    /// lock's calls showed in a `db.transaction` loop's profile (issue 27).
    private let cache = Mutex(Cache())

    public init() {}

    struct TextKey: Hashable {
        let isUpdate: Bool
        let columns: UInt64
        let references: UInt64
    }

    /// A class, not a struct: a call takes one reference to it, not one
    /// to each of its arrays (their retains and releases showed in a
    /// `db.transaction` loop's profile, issue 27).
    public final class Layout: Sendable {
        let table: String
        let keyColumn: String
        let keyIndex: Int
        /// The columns whose values the plan reads (the key, the allowed
        /// words', the JSON ones, the references'; bit `i`: column `i`):
        /// a caller binding values of its own (``PlannedWrite/Argument/given(_:)``)
        /// gives these as values.
        public let inspected: UInt64
        /// The columns' names in UTF-8, for callers that match names in
        /// bytes (a Lua table's keys) without making strings.
        public let utf8Names: [[UInt8]]
        /// The creation dates' columns (bit `i`: column `i`).
        let dateOnInsert: UInt64
        let dateOnUpdate: [Int]
        let allowed: [(index: Int, words: [String])]
        let json: [Int]
        /// Single-column foreign keys, by the column's position.
        let references: [(index: Int, table: String, key: String)]

        init(names: [String], table: String, keyColumn: String, keyIndex: Int, dateOnInsert: UInt64, dateOnUpdate: [Int],
             allowed: [(index: Int, words: [String])], json: [Int], references: [(index: Int, table: String, key: String)]) {
            utf8Names = names.map { Array($0.utf8) }
            self.table = table
            self.keyColumn = keyColumn
            self.keyIndex = keyIndex
            var inspected: UInt64 = 1 << keyIndex
            for (index, _) in allowed { inspected |= 1 << index }
            for index in json { inspected |= 1 << index }
            for reference in references { inspected |= 1 << reference.index }
            self.inspected = inspected
            self.dateOnInsert = dateOnInsert
            self.dateOnUpdate = dateOnUpdate
            self.allowed = allowed
            self.json = json
            self.references = references
        }
    }

    /// The layout of `spec` for `Record`, made once per spec.
    public func layout<Record: StoreRecord>(_ spec: TableSpec, _: Record.Type) -> Layout? {
        cache.withLock { cache in
            if let layout = cache.layout, cache.names == spec.names { return layout }
            guard let made = Self.makeLayout(spec, Record.self) else { return nil }
            cache.names = spec.names
            cache.layout = made
            cache.texts.removeAll()
            cache.lastText = nil
            return made
        }
    }

    private static func makeLayout<Record: StoreRecord>(_ spec: TableSpec, _: Record.Type) -> Layout? {
        guard spec.columns.count <= 64 else { return nil }
        let index = { (name: String) in spec.names.firstIndex(of: name) }
        guard let keyIndex = index(Record.primaryKeyColumns[0]) else { return nil }
        var allowed: [(Int, [String])] = []
        for (column, words) in Record.allowedValues.sorted(by: { $0.key < $1.key }) {
            if let position = index(column) { allowed.append((position, words)) }
        }
        let made = Layout(
            names: spec.names,
            table: Record.databaseTableName,
            keyColumn: Record.primaryKeyColumns[0],
            keyIndex: keyIndex,
            dateOnInsert: spec.names.indices.reduce(0) { mask, index in
                RecordTable<Record>.dateColumnsSetOnInsert.contains(spec.names[index]) ? mask | 1 << index : mask
            },
            dateOnUpdate: RecordTable<Record>.dateColumnsOrderedOnUpdate.compactMap(index),
            allowed: allowed,
            json: Record.jsonColumns.compactMap(index),
            references: spec.references.compactMap { reference in index(reference.column).map { ($0, reference.table, reference.key) } })
        return made
    }

    func text(_ key: TextKey, make: () -> String) -> String {
        cache.withLock { cache in
            if let lastText = cache.lastText, lastText.key == key { return lastText.text }
            let text: String
            if let known = cache.texts[key] {
                text = known
            } else {
                text = make()
                cache.texts[key] = text
            }
            cache.lastText = (key, text)
            return text
        }
    }
}

/// One planned statement (``RecordWritePlans/plannedInsert(_:given:spec:dialect:layout:derives:generatedKey:)``,
/// ``RecordWritePlans/plannedUpdate(key:_:given:spec:dialect:layout:)``).
///
/// A class: a caller in another module tore the struct (an optional of
/// it) down through its value witnesses, field by field, a twentieth of
/// a repository update in a `db.transaction` loop (issue 27); released,
/// the class is torn down by its own code.
public final class PlannedWrite {
    public let sql: String
    /// The row's key, when known before the write (nil: the rowid).
    let key: StoreValue?
    /// Written only where the rows it refers to exist (`WHERE EXISTS`).
    let checksReferences: Bool
    let isUpdate: Bool
    /// The values by column position (empty: none, every column's
    /// value given or not written), and the columns' names: the fields
    /// by name are made only to name a refusal (``fields``).
    let values: [StoreValue?]
    let names: [String]
    /// The columns written and, among them, those whose values the
    /// caller binds itself (bit `i`: column `i`; ``Argument/given(_:)``).
    let columns: UInt64
    public let given: UInt64
    /// The layout it was planned with, and the references it checks (bit
    /// `i`: column `i`): the values after the columns' (``forEachArgument(_:)``).
    let layout: RecordWritePlans.Layout
    let references: UInt64

    init(sql: String, key: StoreValue?, checksReferences: Bool, isUpdate: Bool, values: [StoreValue?], names: [String],
         columns: UInt64, given: UInt64, layout: RecordWritePlans.Layout, references: UInt64) {
        self.sql = sql
        self.key = key
        self.checksReferences = checksReferences
        self.isUpdate = isUpdate
        self.values = values
        self.names = names
        self.columns = columns
        self.given = given
        self.layout = layout
        self.references = references
    }

    /// One of the statement's values.
    public enum Argument {
        case value(StoreValue)
        /// The caller's own value of column `i`, which it checked and did
        /// not make into a ``StoreValue`` (``RecordWritePlans/plannedUpdate(key:_:given:spec:dialect:layout:)``).
        case given(Int)
    }

    /// The statement's values in order: the columns written, the key of
    /// an update, then each referenced row's key. Made from ``values``
    /// as they are bound, not kept as an array of their own: building and
    /// tearing down that array was a share of a repository write in a
    /// `db.transaction` loop (issue 27).
    public func forEachArgument(_ body: (Argument) -> Void) {
        var remaining = columns
        while remaining != 0 {
            let index = remaining.trailingZeroBitCount
            remaining &= remaining - 1
            if given & (1 << index) != 0 { body(.given(index)) } else { body(.value(values[index]!)) }
        }
        if isUpdate, let key { body(.value(key)) }
        for reference in layout.references where references & (1 << reference.index) != 0 {
            body(.value(values[reference.index]!))
        }
    }

    /// ``forEachArgument(_:)`` of a plan whose values are all made
    /// (``given`` empty): Store's own run.
    public func forEachArgument(_ body: (StoreValue) -> Void) {
        precondition(given == 0, "a planned write with values the caller binds is the caller's to run")
        forEachArgument { (argument: Argument) in
            if case let .value(value) = argument { body(value) }
        }
    }

    /// Where an update's key is among ``forEachArgument(_:)``'s values
    /// (0: the first); nil for an insert.
    public var keyPosition: Int? {
        isUpdate ? columns.nonzeroBitCount : nil
    }

    /// At least as many values as ``forEachArgument(_:)`` gives.
    public var argumentCapacity: Int { names.count + 1 + layout.references.count }

    /// ``forEachArgument(_:)``'s values as an array (Store's own run).
    public var arguments: [StoreValue] {
        var arguments: [StoreValue] = []
        arguments.reserveCapacity(argumentCapacity)
        forEachArgument { (value: StoreValue) in arguments.append(value) }
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
        guard let layout = plans.layout(spec, Record.self) else { return nil }
        return plans.plannedInsert(values, given: 0, spec: spec, dialect: dialect, layout: layout,
                                   derives: derives, generatedKey: generatedKey)
    }

    /// The UPDATE ``update(_:key:fields:spec:)`` would run for `values`,
    /// or nil when the general path must run.
    public func plannedUpdate(key: StoreValue, _ values: consuming [StoreValue?], spec: TableSpec, dialect: SQLDialect,
                              plans: RecordWritePlans) -> PlannedWrite? {
        guard let layout = plans.layout(spec, Record.self) else { return nil }
        return plans.plannedUpdate(key: key, values, given: 0, spec: spec, dialect: dialect, layout: layout)
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
}

/// The planning itself, on the layout (``RecordWritePlans/layout(_:_:)``)
/// and not generic over the record: a call made through ``RecordTable``'s
/// generic methods looked its types' metadata up each time (issue 27).
extension RecordWritePlans {
    /// The INSERT ``RecordTable/insert(_:_:spec:)`` would run for `values`
    /// (by column position; nil: not given, or in `given`), or nil when the
    /// general path must run. `given`: the columns whose values the caller
    /// binds itself, present and not NULL, none of ``Layout/inspected``.
    public func plannedInsert(_ values: consuming [StoreValue?], given: UInt64, spec: TableSpec, dialect: SQLDialect,
                              layout: Layout, derives: Bool, generatedKey: Bool) -> PlannedWrite? {
        guard !derives, values.count == spec.columns.count, given & layout.inspected == 0 else { return nil }
        var now: Double?
        // As ``RecordTable/insertedFields(_:_:spec:evaluatingDefaults:)`` fills them.
        for (index, column) in spec.columns.enumerated() where values[index] == nil && given & (1 << index) == 0 {
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
        let (columns, references) = Self.masks(values, given, layout)
        // A reference without a known key: checked first, by the general path.
        guard references == 0 || (key != nil && key != .null) else { return nil }
        let table = layout.table
        let sql = text(.init(isUpdate: false, columns: columns, references: references)) {
            let names = Self.names(columns, spec)
            let head = "INSERT INTO \(dialect.quote(table)) (\(names.map(dialect.quote).joined(separator: ", "))) "
            let marks = Array(repeating: "?", count: names.count).joined(separator: ", ")
            guard references != 0 else { return head + "VALUES (\(marks))" }
            return head + "SELECT \(marks)" + Self.existing(references, layout, dialect, joinedBy: " WHERE ")
        }
        return PlannedWrite(sql: sql, key: key, checksReferences: references != 0, isUpdate: false,
                            values: values, names: spec.names, columns: columns, given: given, layout: layout,
                            references: references)
    }

    /// The UPDATE ``RecordTable/update(_:key:fields:spec:)`` would run for
    /// `values` (`given` as for ``plannedInsert(_:given:spec:dialect:layout:derives:generatedKey:)``;
    /// empty: every value nil), or nil when the general path must run.
    public func plannedUpdate(key: StoreValue, _ values: consuming [StoreValue?], given: UInt64, spec: TableSpec,
                              dialect: SQLDialect, layout: Layout) -> PlannedWrite? {
        guard values.isEmpty || values.count == spec.columns.count, given & layout.inspected == 0 else { return nil }
        if !values.isEmpty, let newKey = values[layout.keyIndex] {
            // Changing the key is refused by the general path.
            guard newKey == key else { return nil }
            values[layout.keyIndex] = nil
        }
        if !layout.dateOnUpdate.isEmpty {
            let now = Date().timeIntervalSince1970
            for index in layout.dateOnUpdate where given & (1 << index) == 0 && (values.isEmpty || values[index] == nil) {
                if values.isEmpty { values = [StoreValue?](repeating: nil, count: spec.columns.count) }
                values[index] = .real(now)
            }
        }
        guard Self.acceptable(values, layout) else { return nil }
        let (columns, references) = Self.masks(values, given, layout)
        guard columns != 0 else { return nil }
        let table = layout.table, keyColumn = layout.keyColumn
        let sql = text(.init(isUpdate: true, columns: columns, references: references)) {
            let assignments = Self.names(columns, spec).map { dialect.quote($0) + " = ?" }.joined(separator: ", ")
            return "UPDATE \(dialect.quote(table)) SET \(assignments) WHERE \(dialect.quote(keyColumn)) = ?"
                + Self.existing(references, layout, dialect, joinedBy: " AND ")
        }
        return PlannedWrite(sql: sql, key: key, checksReferences: references != 0, isUpdate: true,
                            values: values, names: spec.names, columns: columns, given: given, layout: layout,
                            references: references)
    }

    /// What ``RecordRepository/validate(_:columns:)`` and the JSON check
    /// before a write accept: each word one of its column's, no NUL in
    /// JSON text.
    private static func acceptable(_ values: [StoreValue?], _ layout: Layout) -> Bool {
        if values.isEmpty { return true }
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
    private static func masks(_ values: [StoreValue?], _ given: UInt64, _ layout: Layout) -> (UInt64, UInt64) {
        var columns = given
        for (index, value) in values.enumerated() where value != nil { columns |= 1 << index }
        var references: UInt64 = 0
        if values.isEmpty { return (columns, references) }
        for reference in layout.references {
            if let value = values[reference.index], value != .null { references |= 1 << reference.index }
        }
        return (columns, references)
    }

    private static func names(_ mask: UInt64, _ spec: TableSpec) -> [String] {
        spec.names.indices.filter { mask & (1 << $0) != 0 }.map { spec.names[$0] }
    }

    private static func existing(_ mask: UInt64, _ layout: Layout, _ dialect: SQLDialect,
                                 joinedBy lead: String) -> String {
        let terms = layout.references.filter { mask & (1 << $0.index) != 0 }.map {
            "EXISTS (SELECT 1 FROM \(dialect.quote($0.table)) WHERE \(dialect.quote($0.key)) = ?)"
        }
        return terms.isEmpty ? "" : lead + terms.joined(separator: " AND ")
    }
}
