/// How the rows of one result are laid out: their columns, and the format
/// each column comes in (binary for the types ``PostgresType`` reads in
/// binary once the statement is prepared, text for the rest and for a
/// statement's first run in a pipeline).
///
/// One layout per prepared statement: a caller that turns rows into
/// something else can work out per-column decisions once per layout
/// (its identity stays the same while the statement stays prepared).
public final class PostgresRowLayout {
    public let columns: [PostgresColumn]
    /// Per column: whether its values come in binary (else text).
    public let binary: [Bool]

    /// Per column: the size its binary values must have (0: any).
    let binarySizes: [Int]

    init(columns: [PostgresColumn], binary: [Bool]) {
        self.columns = columns
        self.binary = binary
        binarySizes = zip(columns, binary).map { column, binary in
            guard binary else { return 0 }
            switch column.typeOID {
            case PostgresType.int2: return 2
            case PostgresType.int4, PostgresType.oid, PostgresType.float4: return 4
            case PostgresType.int8, PostgresType.float8: return 8
            case PostgresType.bool: return 1
            default: return 0
            }
        }
    }

    /// Bind's result format codes for these columns.
    var resultFormats: [Int16] { binary.map { $0 ? 1 : 0 } }
}

/// One DataRow read in place, in the connection's receive buffer: what
/// ``PostgresConnection/query(_:_:eachRow:)`` hands its closure, row by
/// row, while the rest of the result is still arriving.
///
/// **Valid only during that call**: ``body`` points into the buffer the
/// next read overwrites. Copy what must outlive it.
///
/// The connection checked it before handing it out: as many values as
/// the layout has columns, each within the body, and the binary integers,
/// floats and booleans of their exact sizes (2, 4 or 8 bytes; 1). A row
/// that fails the check is a protocol violation, which closes the
/// connection as any other does.
public struct PostgresDataRow {
    /// The result's columns and formats (kept alive by the statement for
    /// the whole call).
    public unowned(unsafe) let layout: PostgresRowLayout
    /// The DataRow message's body as the server sent it: an Int16 count of
    /// columns, then per column an Int32 length (-1 for NULL) and that
    /// many bytes, all big-endian. Its count matches ``layout``'s columns
    /// (checked before the row is handed out).
    public let body: UnsafeRawBufferPointer

    init(layout: PostgresRowLayout, body: UnsafeRawBufferPointer) {
        self.layout = layout
        self.body = body
    }

    /// Calls `visit` with each column's index and bytes (nil for NULL), in
    /// order, without copying them.
    public func forEachColumn(_ visit: (Int, UnsafeRawBufferPointer?) throws -> Void) throws {
        var reader = BodyReader(body)
        let count = Int(UInt16(bitPattern: try reader.int16()))  // a count: never negative, whatever the bytes say
        guard count == layout.columns.count else {
            throw PostgresClientError.protocolViolation("a row has \(count) values for \(layout.columns.count) columns")
        }
        for index in 0..<count {
            let length = Int(try reader.int32())
            try visit(index, length < 0 ? nil : try reader.take(length))
        }
    }

    /// The row's values, decoded as ``PostgresResult/rows`` gives them.
    public func values() throws -> [PostgresValue] {
        var row: [PostgresValue] = []
        row.reserveCapacity(layout.columns.count)
        let columns = layout.columns
        let binary = layout.binary
        try forEachColumn { index, bytes in
            guard let bytes else { return row.append(.null) }
            row.append(try PostgresValue.decode(bytes, type: columns[index].typeOID, binary: binary[index]))
        }
        return row
    }

    /// Checks the body's shape before it is handed out (see the type's
    /// documentation; a negative length is NULL). Once per row of every
    /// result: plain loads, no reader.
    static func check(_ body: UnsafeRawBufferPointer, layout: PostgresRowLayout) throws {
        func short(_ what: String) -> PostgresClientError {
            .protocolViolation("a message from the server ended before its \(what)")
        }
        let end = body.count
        guard end >= 2, let base = body.baseAddress else { throw short("Int16") }
        let count = Int(Int16(bitPattern: UInt16(bigEndian: base.loadUnaligned(as: UInt16.self))))
        guard count == layout.columns.count else {
            throw PostgresClientError.protocolViolation("a row has \(count) values for \(layout.columns.count) columns")
        }
        try layout.binarySizes.withUnsafeBufferPointer { sizes in
            var offset = 2
            for index in 0..<count {
                guard end - offset >= 4 else { throw short("Int32") }
                let length = Int(Int32(bitPattern: UInt32(bigEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt32.self))))
                offset += 4
                guard length >= 0 else { continue }
                guard length <= end - offset else { throw short("\(length) bytes") }
                let size = sizes[index]
                if size != 0, length != size {
                    throw PostgresClientError.protocolViolation(
                        "a binary value of type \(layout.columns[index].typeOID) has \(length) bytes, expected \(size)")
                }
                offset += length
            }
        }
    }
}
