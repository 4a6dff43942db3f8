import Foundation

/// What `db.copy` writes: rows into one table, in one write that keeps
/// all of them or none (PostgreSQL: COPY FROM STDIN; SQLite: a prepared
/// INSERT per row in one transaction). ``DatabaseSession/copy(_:)`` runs it
/// under the session's rules as any write: counted, under `--max-changes`,
/// refused by `--read-only`, reported by `--dry-run`, checked by `--sandbox`.
public struct CopyRequest: Sendable {
    public enum Source: Sendable {
        /// Values in ``CopyRequest/columns``' order (an empty list: the
        /// table's columns in order); row 1 is the Lua table's first.
        case rows([[StoreValue]])
        /// A CSV file (RFC 4180: `,`, `"` quoting, an unquoted empty
        /// field is NULL, a quoted one the empty string); `header`: its
        /// first line names the columns and is skipped.
        case csv(path: String, header: Bool)
    }

    /// As written in SQL, unquoted (`builds`, `public.builds`).
    public let table: String
    /// As written in SQL, unquoted; empty: every column of the table, in order.
    public let columns: [String]
    public let source: Source
    /// What separates a file's fields: `,` (CSV) or a tab (TSV).
    public var delimiter: UInt8 = UInt8(ascii: ",")
    /// Told how far a file's copy has come (a progress bar).
    public var progress: CopyProgress?
    /// The table was named by a script (`db.copy`, the shell's `.import`):
    /// its name means what the script's SQL would mean by it. Otherwise
    /// the copy is opsh's own, into one of opsh's tables where it names
    /// one (PostgreSQL: ``PostgresHomeSchema``).
    public var namedByScript = false

    /// Refuses a table or column name that is not a plain SQL identifier:
    /// the names go into the statement as written, so they mean on each
    /// engine what they mean in a script's SQL.
    public init(table: String, columns: [String], source: Source) throws {
        guard Self.isIdentifier(table, qualified: true) else {
            throw CopyFailure("the table name \(VisibleName(table)) is not a plain SQL name (letters, digits, _; schema.table)")
        }
        for column in columns where !Self.isIdentifier(column, qualified: false) {
            throw CopyFailure("the column name \(VisibleName(column)) is not a plain SQL name (letters, digits, _)")
        }
        if Set(columns.map { $0.lowercased() }).count != columns.count {
            throw CopyFailure("a column is named twice in columns: \(columns.joined(separator: ", "))")
        }
        self.table = table
        self.columns = columns
        self.source = source
    }

    static func isIdentifier(_ name: String, qualified: Bool) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard !parts.isEmpty, parts.count <= (qualified ? 2 : 1) else { return false }
        return parts.allSatisfy { part in
            guard let first = part.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic) else { return false }
            return part.unicodeScalars.allSatisfy { $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) }
        }
    }

    /// Where in the source a row is, as a user finds it: `row 3` of the
    /// Lua table, `line 3 of /tmp/builds.csv`.
    func place(_ number: Int) -> String {
        switch source {
        case .rows: "row \(number)"
        case let .csv(path, _): "line \(number) of \(path)"
        }
    }
}

/// How far a copy from a file has come: bytes of the file read of its
/// size, told as the copy runs (every 1,024 lines on SQLite, every piece
/// sent on PostgreSQL), on the thread that runs the copy.
public final class CopyProgress: @unchecked Sendable {
    let report: (_ bytes: Int, _ of: Int) -> Void

    /// `report` is called on the thread that runs the copy (the Lua
    /// thread), never at once on two.
    public init(_ report: @escaping (_ bytes: Int, _ of: Int) -> Void) {
        self.report = report
    }
}

/// A name in a message, its control characters visible.
struct VisibleName: CustomStringConvertible {
    let name: String
    init(_ name: String) { self.name = name }
    var description: String {
        "'" + name.unicodeScalars.map { $0.properties.generalCategory == .control ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined() + "'"
    }
}

/// `db.copy`'s failure: what was wrong and where (the row of the Lua
/// table or the line of the file, and the column). Nothing of the copy
/// was kept.
public struct CopyFailure: Error, CustomStringConvertible, Equatable, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

extension CopyRequest {
    /// A file whose first line names the columns (`.import FILE TABLE`):
    /// the columns are those names, so the file's columns may come in any
    /// order and a name the table lacks is refused by the engine. A file
    /// named `.tsv` or `.tab` is read with tabs between fields, any other
    /// as CSV.
    public static func file(_ path: String, into table: String) throws -> CopyRequest {
        let tabs = path.hasSuffix(".tsv") || path.hasSuffix(".tab")
        let delimiter = tabs ? UInt8(ascii: "\t") : UInt8(ascii: ",")
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw CopyFailure("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        defer { try? handle.close() }
        // The first line, read a piece at a time.
        var head: [UInt8] = []
        while !head.contains(UInt8(ascii: "\n")), head.count < 1 << 20,
              let piece = try handle.read(upToCount: 64 * 1024), !piece.isEmpty {
            head += piece
        }
        if head.starts(with: [0xEF, 0xBB, 0xBF]) {
            throw CopyFailure("\(path) begins with a byte order mark: save it as UTF-8 without one")
        }
        var records = CSVRecords(Array(head.prefix { $0 != UInt8(ascii: "\n") }), delimiter: delimiter)
        guard let (_, names) = try records.next(), !names.isEmpty, names.allSatisfy({ !($0 ?? "").isEmpty }) else {
            throw CopyFailure("\(path): its first line must name the columns, separated by \(tabs ? "tabs" : "commas")")
        }
        var request = try CopyRequest(table: table, columns: names.map { $0! }, source: .csv(path: path, header: true))
        request.delimiter = delimiter
        return request
    }
}
