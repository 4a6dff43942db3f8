import Foundation
import GRDB

/// `.dump [TABLE]`: the database, or one table, as SQL text that `sqlite3`
/// reads back into an empty file, in the shape sqlite3's own `.dump`
/// writes: the tables' CREATE statements, their rows as INSERTs, then
/// their indexes, triggers and views, in one transaction.
///
/// Text with control characters is written as `'…'||char(10)||'…'`, so
/// that the dump stays valid SQL and safe to show on a terminal; reals as
/// the shortest text that reads back as the same double; blobs as `X'…'`.
/// The reading is one statement per table on the session's read
/// connection: its snapshot lasts as long as that statement, as any
/// query's does.
public enum SQLDump {
    public static func write(_ db: Database, table: String?, to out: (String) throws -> Void) throws {
        var tables = try Row.fetchAll(db, sql: """
            SELECT name, sql FROM sqlite_schema
            WHERE type = 'table' AND sql NOT NULL AND name NOT LIKE 'sqlite_%' AND sql NOT LIKE 'CREATE VIRTUAL%'
            ORDER BY rowid
            """).map { (name: $0["name"] as String, sql: $0["sql"] as String) }
        if let table {
            tables = tables.filter { $0.name.caseInsensitiveCompare(table) == .orderedSame }
            guard !tables.isEmpty else { throw StoreError.refused(reason: "no table named \(table) (.tables lists them)") }
        }
        try out("PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n")
        for (name, sql) in tables {
            try out(sql + ";\n")
            let quoted = quoteIdentifier(name)
            let cursor = try Row.fetchCursor(db, sql: "SELECT * FROM \(quoted)")
            var text = ""
            while let row = try cursor.next() {
                text += "INSERT INTO \(quoted) VALUES("
                for index in 0..<row.count {
                    if index > 0 { text += "," }
                    literal(row[index] as DatabaseValue, into: &text)
                }
                text += ");\n"
                if text.utf8.count > 1 << 16 {
                    try out(text)
                    text = ""
                }
            }
            try out(text)
        }
        let names = Set(tables.map { $0.name.lowercased() })
        if table == nil, try db.tableExists("sqlite_sequence") {
            let sequences = try Row.fetchAll(db, sql: "SELECT name, seq FROM sqlite_sequence")
            if !sequences.isEmpty {
                var text = "DELETE FROM sqlite_sequence;\n"
                for row in sequences {
                    text += "INSERT INTO sqlite_sequence VALUES("
                    literal(row[0] as DatabaseValue, into: &text)
                    text += ","
                    literal(row[1] as DatabaseValue, into: &text)
                    text += ");\n"
                }
                try out(text)
            }
        }
        for row in try Row.fetchAll(db, sql: """
            SELECT tbl_name, sql FROM sqlite_schema
            WHERE type IN ('index', 'trigger', 'view') AND sql NOT NULL AND name NOT LIKE 'sqlite_%'
            ORDER BY CASE type WHEN 'index' THEN 0 WHEN 'trigger' THEN 1 ELSE 2 END, rowid
            """) where table == nil || names.contains((row["tbl_name"] as String).lowercased()) {
            try out((row["sql"] as String) + ";\n")
        }
        try out("COMMIT;\n")
    }

    /// `value` as an SQL literal.
    static func literal(_ value: DatabaseValue, into text: inout String) {
        switch value.storage {
        case .null:
            text += "NULL"
        case let .int64(number):
            text += String(number)
        case let .double(number):
            if number.isNaN { text += "NULL" } else if number.isInfinite { text += number < 0 ? "-9e999" : "9e999" } else {
                let shortest = "\(number)"
                // "1.0" and "1e-07" read back as the same double; "1" would be an integer.
                text += shortest.contains(".") || shortest.contains("e") ? shortest : shortest + ".0"
            }
        case let .string(string):
            quoted(string, into: &text)
        case let .blob(data):
            let digits = Array("0123456789abcdef".utf8)
            var hex = [UInt8]()
            hex.reserveCapacity(data.count * 2)
            for byte in data {
                hex.append(digits[Int(byte >> 4)])
                hex.append(digits[Int(byte & 15)])
            }
            text += "X'" + String(decoding: hex, as: UTF8.self) + "'"
        }
    }

    /// `'…'` with quotes doubled; a control character (other than a tab)
    /// as `char(N)` between quoted parts.
    static func quoted(_ string: String, into text: inout String) {
        var parts: [String] = []
        var current = ""
        for scalar in string.unicodeScalars {
            if scalar.value < 0x20 && scalar != "\t" || (0x7F...0x9F).contains(scalar.value) {
                parts.append("'" + current + "'")
                parts.append("char(\(scalar.value))")
                current = ""
            } else if scalar == "'" {
                current += "''"
            } else {
                current.unicodeScalars.append(scalar)
            }
        }
        parts.append("'" + current + "'")
        text += parts.count == 1 ? parts[0] : parts.filter { $0 != "''" }.joined(separator: "||")
    }
}
