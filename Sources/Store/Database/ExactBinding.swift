import Foundation
import GRDB
import GRDBSQLite

// GRDB binds a Swift String as a C string (`sqlite3_bind_text(…, -1, …)`)
// and reads TEXT with `String(cString:)`: both end the text at its first
// NUL byte, so `a\0b` was stored as `a`, and a key `com.ex.app\0x` reached
// the row `com.ex.app` (issue 24, item 3). Store's statements bind and read
// through these instead, text with its length: SQLite keeps every byte
// (SQLDialect.textKeepsAnyBytes). GRDB still runs the statement (its
// observers, its authorizer, its error handling).

extension Statement {
    /// Binds `values` by position, text and blobs with their lengths; a
    /// count that does not match the statement's parameters is refused as
    /// GRDB refuses it. Run the statement next without arguments
    /// (`execute()`, `Row.fetchCursor(statement)`): GRDB runs it as bound.
    func bindExactly(_ values: [DatabaseValue]) throws {
        let count = Int(sqlite3_bind_parameter_count(sqliteStatement))
        guard values.count == count else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE,
                                message: "wrong number of statement arguments: \(values.count) given for \(count) parameter(s)", sql: sql)
        }
        bindRaw { handle in
            for (offset, value) in values.enumerated() { ExactBinding.bind(value, to: handle, at: Int32(offset + 1)) }
        }
    }

    /// Lets `bind` bind every parameter with SQLite's C API. GRDB first
    /// takes the parameters as set (to NULL), so that running the statement
    /// without arguments next keeps what `bind` bound; SQLite copies what
    /// is bound, so it may point anywhere.
    public func bindRaw(_ bind: (OpaquePointer) throws -> Void) rethrows {
        // A statement whose last step failed reports that failure again at
        // its first reset, which GRDB's setUncheckedArguments takes as fatal.
        sqlite3_reset(sqliteStatement)
        let count = Int(sqlite3_bind_parameter_count(sqliteStatement))
        setUncheckedArguments(count < ExactBinding.nulls.count ? ExactBinding.nulls[count]
                                  : StatementArguments(Array(repeating: DatabaseValue.null, count: count)))
        try bind(sqliteStatement)
    }
}

/// Values in and out of SQLite's C API with their lengths.
enum ExactBinding {
    /// `SQLITE_TRANSIENT`: SQLite copies the bytes.
    static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    /// NULL arguments for statements of up to 63 parameters, made once:
    /// GRDB's `StatementArguments(_:)` of a new array was most of a
    /// repository write's binding in perf (BENCHMARKS.md, "The domain
    /// layer against hand-written SQL").
    static let nulls: [StatementArguments] = (0..<64).map { StatementArguments(Array(repeating: DatabaseValue.null, count: $0)) }

    static func bind(_ value: DatabaseValue, to handle: OpaquePointer, at position: Int32) {
        switch value.storage {
        case .null: sqlite3_bind_null(handle, position)
        case let .int64(number): sqlite3_bind_int64(handle, position, number)
        case let .double(number): sqlite3_bind_double(handle, position, number)
        case let .string(text): bind(text: text, to: handle, at: position)
        case let .blob(data):
            data.withUnsafeBytes { bytes in
                // A NULL pointer would bind NULL: an empty blob is X''.
                sqlite3_bind_blob(handle, position, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(bytes.count), transient)
            }
        }
    }

    static func bind(text: String, to handle: OpaquePointer, at position: Int32) {
        guard !text.isEmpty else {
            // A NULL pointer would bind NULL: the empty text is ''.
            sqlite3_bind_text(handle, position, "", 0, transient)
            return
        }
        var text = text
        text.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { characters in
                _ = sqlite3_bind_text(handle, position, characters.baseAddress, Int32(characters.count), transient)
            }
        }
    }

    /// Column `column` of the statement's current row, as stored: text
    /// with its length (a NUL included), a blob's bytes.
    static func value(_ handle: OpaquePointer, _ column: Int32) -> StoreValue {
        switch sqlite3_column_type(handle, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, column))
        case SQLITE_TEXT:
            guard let text = sqlite3_column_text(handle, column) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(handle, column))), as: UTF8.self))
        case SQLITE_BLOB:
            guard let blob = sqlite3_column_blob(handle, column) else { return .blob([]) }
            return .blob([UInt8](UnsafeRawBufferPointer(start: blob, count: Int(sqlite3_column_bytes(handle, column)))))
        default: return .null
        }
    }
}
