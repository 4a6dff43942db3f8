import Foundation

/// The records of a CSV text as PostgreSQL's `COPY … (FORMAT csv)` reads
/// them (RFC 4180): fields split by `,`, a field in `"` may hold `,`,
/// line breaks and `""` (one quote); an unquoted empty field is NULL, a
/// quoted empty one the empty string; lines end in LF or CRLF. What the
/// SQLite side of `db.copy` reads a file with, so both engines take the
/// same file the same way.
struct CSVRecords {
    private let bytes: [UInt8]
    /// `,`, or a tab for a TSV file (`.import FILE.tsv`).
    private let delimiter: UInt8
    private var at = 0
    /// The line the next record starts on (1-based).
    private(set) var line = 1
    /// Bytes read so far, of ``size``.
    var offset: Int { at }
    var size: Int { bytes.count }

    init(_ bytes: [UInt8], delimiter: UInt8 = UInt8(ascii: ",")) {
        self.bytes = bytes
        self.delimiter = delimiter
    }

    /// The next record and the line it starts on; nil at the end. A quote
    /// that is never closed is an error naming the line it opened on.
    mutating func next() throws -> (line: Int, fields: [String?])? {
        guard at < bytes.count else { return nil }
        let start = line
        var fields: [String?] = []
        var field: [UInt8] = []
        var quoted = false
        while true {
            guard at < bytes.count else {
                fields.append(quoted || !field.isEmpty ? Self.text(field) : nil)
                return (start, fields)
            }
            let byte = bytes[at]
            at += 1
            switch byte {
            case UInt8(ascii: "\""):
                let opened = line
                quoted = true
                while true {
                    guard at < bytes.count else { throw CopyFailure("line \(opened): a quoted field is never closed") }
                    let inner = bytes[at]
                    at += 1
                    if inner == UInt8(ascii: "\"") {
                        if at < bytes.count, bytes[at] == UInt8(ascii: "\"") {
                            field.append(inner)
                            at += 1
                            continue
                        }
                        break
                    }
                    if inner == UInt8(ascii: "\n") { line += 1 }
                    field.append(inner)
                }
            case delimiter:
                fields.append(quoted || !field.isEmpty ? Self.text(field) : nil)
                field.removeAll(keepingCapacity: true)
                quoted = false
            case UInt8(ascii: "\r") where at < bytes.count && bytes[at] == UInt8(ascii: "\n"):
                continue
            case UInt8(ascii: "\n"):
                line += 1
                fields.append(quoted || !field.isEmpty ? Self.text(field) : nil)
                return (start, fields)
            default:
                field.append(byte)
            }
        }
    }

    private static func text(_ bytes: [UInt8]) -> String {
        String(decoding: bytes, as: UTF8.self)
    }
}

/// Rows as CSV for `COPY … FROM STDIN (FORMAT csv)`: text always quoted
/// (so the empty string stays one), NULL an empty field, integers and
/// reals as numbers, bytes as bytea's hex form.
enum CSVWriter {
    /// Appends rows from `rows[next...]` to `buffer` until it holds about
    /// `limit` bytes; returns the index of the first row not written.
    static func append(_ rows: [[StoreValue]], from next: Int, into buffer: inout [UInt8], limit: Int) throws -> Int {
        var index = next
        while index < rows.count, buffer.count < limit {
            for (position, value) in rows[index].enumerated() {
                if position > 0 { buffer.append(UInt8(ascii: ",")) }
                try append(value, into: &buffer, row: index + 1, column: position + 1)
            }
            buffer.append(UInt8(ascii: "\n"))
            index += 1
        }
        return index
    }

    private static func append(_ value: StoreValue, into buffer: inout [UInt8], row: Int, column: Int) throws {
        switch value {
        case .null:
            break
        case let .integer(number):
            buffer.append(contentsOf: String(number).utf8)
        case let .real(number):
            guard number.isFinite else {
                buffer.append(contentsOf: (number.isNaN ? "NaN" : number < 0 ? "-Infinity" : "Infinity").utf8)
                return
            }
            buffer.append(contentsOf: "\(number)".utf8)
        case let .text(text):
            buffer.append(UInt8(ascii: "\""))
            for byte in text.utf8 {
                if byte == UInt8(ascii: "\"") { buffer.append(byte) }
                buffer.append(byte)
            }
            buffer.append(UInt8(ascii: "\""))
        case let .blob(bytes):
            let digits = Array("0123456789abcdef".utf8)
            buffer.append(contentsOf: "\"\\x".utf8)
            for byte in bytes {
                buffer.append(digits[Int(byte >> 4)])
                buffer.append(digits[Int(byte & 15)])
            }
            buffer.append(UInt8(ascii: "\""))
        case .array, .object:
            throw CopyFailure("row \(row), value \(column): a table is not a column's value")
        }
    }
}
