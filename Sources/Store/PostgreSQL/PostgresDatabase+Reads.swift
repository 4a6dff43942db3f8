import PostgresWire
import TextCodec

extension PostgresDatabase {
    /// The tables a query reads, as the server plans it (`EXPLAIN` with
    /// the values bound: nothing runs), keyed by the schema's spelling; a
    /// statement that would write is refused (`watch` observes queries).
    public func tablesRead(by sql: String, _ arguments: Arguments) throws -> Set<String> {
        let plan = try scriptStatements { try execute("EXPLAIN (FORMAT JSON, VERBOSE false, COSTS false) " + sql, arguments) }
        guard case let .text(json)? = plan.rows.first?.first, let document = try? JSON.parse(json) else {
            throw PostgresStoreError.statement("cannot read the server's plan of: \(sql)")
        }
        var tables: Set<String> = []
        var writes = false
        func visit(_ node: JSON) {
            switch node {
            case let .object(members):
                if let name = node["Relation Name"]?.stringValue { tables.insert(PostgresNames.rowKey(name)) }
                if node["Node Type"]?.stringValue == "ModifyTable" { writes = true }
                for (_, value) in members { visit(value) }
            case let .array(items):
                for item in items { visit(item) }
            default:
                break
            }
        }
        visit(document)
        if writes { throw PostgresStoreError.notAQuery(sql) }
        return tables
    }
}
