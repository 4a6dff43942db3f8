import Foundation
import PostgresWire

extension PostgresDatabase {
    /// The tables a query reads, as the server plans it (`EXPLAIN` with
    /// the values bound: nothing runs), keyed by the schema's spelling; a
    /// statement that would write is refused (`watch` observes queries).
    public func tablesRead(by sql: String, _ arguments: Arguments) throws -> Set<String> {
        let plan = try execute("EXPLAIN (FORMAT JSON, VERBOSE false, COSTS false) " + sql, arguments)
        guard case let .text(json)? = plan.rows.first?.first,
              let document = try? JSONSerializationLite.parse(json) else {
            throw PostgresStoreError.statement("cannot read the server's plan of: \(sql)")
        }
        var tables: Set<String> = []
        var writes = false
        func visit(_ node: Any) {
            if let object = node as? [String: Any] {
                if let name = object["Relation Name"] as? String { tables.insert(PostgresNames.rowKey(name)) }
                if object["Node Type"] as? String == "ModifyTable" { writes = true }
                for value in object.values { visit(value) }
            } else if let array = node as? [Any] {
                for value in array { visit(value) }
            }
        }
        visit(document)
        if writes { throw PostgresStoreError.notAQuery(sql) }
        return tables
    }
}

/// Foundation's JSON reader, named for what it does here.
enum JSONSerializationLite {
    static func parse(_ text: String) throws -> Any {
        try JSONSerialization.jsonObject(with: Data(text.utf8))
    }
}
