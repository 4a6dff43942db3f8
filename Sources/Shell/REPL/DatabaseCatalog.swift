import LuaRuntime

/// The database's tables, columns and schema, for `.tables`, `.schema`
/// and completion. It asks through the `db.query` function captured at
/// start, so a script that replaces the global `db` does not break it.
struct DatabaseCatalog {
    private let runtime: LuaRuntime
    private let query: LuaReference?

    init(runtime: LuaRuntime) {
        self.runtime = runtime
        if case let .reference(function)? = try? runtime.execute("return db and db.query", chunkName: "=(shell)").first {
            query = function
        } else {
            query = nil
        }
    }

    func rows(_ sql: String, _ arguments: [LuaValue] = []) throws -> [[String: LuaValue]] {
        guard let query else { return [] }
        guard case let .array(rows)? = try runtime.call(query, [.string(sql)] + arguments).first else { return [] }
        return rows.map { row in
            guard case let .table(fields) = row else { return [:] }
            var result: [String: LuaValue] = [:]
            for (key, value) in fields { if let name = key.stringValue { result[name] = value } }
            return result
        }
    }

    func tables() throws -> [String] {
        try rows("""
            SELECT name FROM sqlite_master WHERE type IN ('table', 'view')
            AND name NOT LIKE 'sqlite_%' ORDER BY name
            """).compactMap { $0["name"]?.stringValue }
    }

    func columns(of table: String) throws -> [String] {
        try rows("SELECT name FROM pragma_table_info(?)", [.string(table)]).compactMap { $0["name"]?.stringValue }
    }

    /// Table names and their columns.
    func schema() -> [String: [String]] {
        var result: [String: [String]] = [:]
        for table in (try? tables()) ?? [] { result[table] = (try? columns(of: table)) ?? [] }
        return result
    }

    /// The `CREATE` statements of a table (and its indexes and triggers),
    /// or of everything.
    func schemaStatements(of table: String?) throws -> [String] {
        let filter = table == nil ? "" : "AND tbl_name = ?"
        return try rows("""
            SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' \(filter)
            ORDER BY tbl_name, type DESC, name
            """, table.map { [.string($0)] } ?? []).compactMap { $0["sql"]?.stringValue }
    }
}
