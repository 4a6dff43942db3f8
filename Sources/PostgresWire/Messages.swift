// The frames of PostgreSQL's frontend/backend protocol, version 3.0
// (PostgreSQL's documentation, "Frontend/Backend Protocol", "Message
// Formats").
//
// Every message after the start-up one is a type byte, a big-endian Int32
// length that counts itself and the body but not the type byte, and the
// body. Strings are NUL-terminated UTF-8. This file writes the frontend's
// messages into a byte buffer (several per buffer, so a round trip is one
// write) and reads the fields of the backend's; the order in which they are
// exchanged is PostgresConnection's business.

extension Array where Element == UInt8 {
    mutating func appendInt16(_ value: Int16) {
        let bits = UInt16(bitPattern: value)
        append(UInt8(truncatingIfNeeded: bits >> 8))
        append(UInt8(truncatingIfNeeded: bits))
    }

    mutating func appendInt32(_ value: Int32) {
        let bits = UInt32(bitPattern: value)
        append(UInt8(truncatingIfNeeded: bits >> 24))
        append(UInt8(truncatingIfNeeded: bits >> 16))
        append(UInt8(truncatingIfNeeded: bits >> 8))
        append(UInt8(truncatingIfNeeded: bits))
    }

    mutating func appendInt64(_ value: Int64) {
        let bits = UInt64(bitPattern: value)
        for shift in stride(from: 56, through: 0, by: -8) { append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
    }

    /// A string and its terminating NUL. (A NUL inside `string` would end
    /// it early on the server; callers refuse such strings first.)
    mutating func appendCString(_ string: String) {
        append(contentsOf: string.utf8)
        append(0)
    }
}

/// The messages the client sends.
enum Frontend {
    /// The protocol version in the start-up message: 3.0.
    static let protocolVersion: Int32 = 196_608
    /// The "protocol version" that marks a CancelRequest.
    static let cancelRequestCode: Int32 = 80_877_102

    /// Appends one typed message: its type, its length (patched in once the
    /// body is written) and the body.
    static func append(_ type: Character, to buffer: inout [UInt8], body: (inout [UInt8]) -> Void) {
        buffer.append(type.asciiValue!)
        let lengthAt = buffer.count
        buffer.appendInt32(0)
        body(&buffer)
        let length = UInt32(buffer.count - lengthAt)
        buffer[lengthAt] = UInt8(truncatingIfNeeded: length >> 24)
        buffer[lengthAt + 1] = UInt8(truncatingIfNeeded: length >> 16)
        buffer[lengthAt + 2] = UInt8(truncatingIfNeeded: length >> 8)
        buffer[lengthAt + 3] = UInt8(truncatingIfNeeded: length)
    }

    /// StartupMessage: no type byte; the version and `name\0value\0` pairs.
    static func startup(_ parameters: [(String, String)]) -> [UInt8] {
        var body: [UInt8] = []
        body.appendInt32(protocolVersion)
        for (name, value) in parameters {
            body.appendCString(name)
            body.appendCString(value)
        }
        body.append(0)
        var message: [UInt8] = []
        message.appendInt32(Int32(body.count + 4))
        return message + body
    }

    /// CancelRequest, sent on a new connection: the key BackendKeyData gave.
    static func cancelRequest(processID: Int32, secretKey: Int32) -> [UInt8] {
        var message: [UInt8] = []
        message.appendInt32(16)
        message.appendInt32(cancelRequestCode)
        message.appendInt32(processID)
        message.appendInt32(secretKey)
        return message
    }

    /// PasswordMessage (cleartext or md5): the password and a NUL.
    static func password(_ text: String, into buffer: inout [UInt8]) {
        append("p", to: &buffer) { $0.appendCString(text) }
    }

    /// SASLInitialResponse: the chosen mechanism and the client-first-message.
    static func saslInitialResponse(mechanism: String, data: [UInt8], into buffer: inout [UInt8]) {
        append("p", to: &buffer) {
            $0.appendCString(mechanism)
            $0.appendInt32(Int32(data.count))
            $0 += data
        }
    }

    /// SASLResponse: the client-final-message.
    static func saslResponse(_ data: [UInt8], into buffer: inout [UInt8]) {
        append("p", to: &buffer) { $0 += data }
    }

    /// Parse: prepares `sql` as the statement `name` ("" is the unnamed
    /// one), with the parameter types the client declares (0: inferred).
    static func parse(name: String, sql: String, parameterTypes: [UInt32], into buffer: inout [UInt8]) {
        append("P", to: &buffer) {
            $0.appendCString(name)
            $0.appendCString(sql)
            $0.appendInt16(Int16(truncatingIfNeeded: parameterTypes.count))  // read as UInt16
            for oid in parameterTypes { $0.appendInt32(Int32(bitPattern: oid)) }
        }
    }

    /// Describe of a prepared statement: answered by ParameterDescription
    /// and RowDescription (or NoData).
    static func describeStatement(_ name: String, into buffer: inout [UInt8]) {
        append("D", to: &buffer) {
            $0.append(UInt8(ascii: "S"))
            $0.appendCString(name)
        }
    }

    /// Bind: the unnamed portal over statement `name`, with the parameters'
    /// formats and values, and one result format per column.
    static func bind(statement name: String, parameters: [PostgresValue], resultFormats: [Int16], into buffer: inout [UInt8]) {
        append("B", to: &buffer) {
            $0.append(0)  // the unnamed portal
            $0.appendCString(name)
            $0.appendInt16(Int16(truncatingIfNeeded: parameters.count))  // read as UInt16
            for parameter in parameters { $0.appendInt16(parameter.parameterFormat) }
            $0.appendInt16(Int16(truncatingIfNeeded: parameters.count))
            for parameter in parameters { parameter.encodeParameter(into: &$0) }
            $0.appendInt16(Int16(truncatingIfNeeded: resultFormats.count))
            for format in resultFormats { $0.appendInt16(format) }
        }
    }

    /// Execute: the unnamed portal, every row.
    static func execute(into buffer: inout [UInt8]) {
        append("E", to: &buffer) {
            $0.append(0)
            $0.appendInt32(0)
        }
    }

    /// Close of a prepared statement.
    static func closeStatement(_ name: String, into buffer: inout [UInt8]) {
        append("C", to: &buffer) {
            $0.append(UInt8(ascii: "S"))
            $0.appendCString(name)
        }
    }

    /// Sync: ends an extended-query cycle; the server answers ReadyForQuery
    /// (after skipping to here if something failed).
    static func sync(into buffer: inout [UInt8]) {
        append("S", to: &buffer) { _ in }
    }

    /// Query: the simple protocol, one or more statements, text results.
    static func query(_ sql: String, into buffer: inout [UInt8]) {
        append("Q", to: &buffer) { $0.appendCString(sql) }
    }

    /// CopyData: a piece of a COPY FROM STDIN's data (any split; the
    /// server joins them).
    static func copyData(_ bytes: UnsafeRawBufferPointer, into buffer: inout [UInt8]) {
        append("d", to: &buffer) { $0.append(contentsOf: bytes) }
    }

    /// CopyDone: the end of a COPY FROM STDIN's data.
    static func copyDone(into buffer: inout [UInt8]) {
        append("c", to: &buffer) { _ in }
    }

    /// CopyFail: refuses a COPY FROM STDIN the server started.
    static func copyFail(_ message: String, into buffer: inout [UInt8]) {
        append("f", to: &buffer) { $0.appendCString(message) }
    }

    /// Terminate: the polite goodbye before closing the socket.
    static func terminate(into buffer: inout [UInt8]) {
        append("X", to: &buffer) { _ in }
    }
}

/// The backend's message types this client handles, by their type byte.
enum Backend {
    static let authentication = UInt8(ascii: "R")
    static let parameterStatus = UInt8(ascii: "S")
    static let backendKeyData = UInt8(ascii: "K")
    static let readyForQuery = UInt8(ascii: "Z")
    static let errorResponse = UInt8(ascii: "E")
    static let noticeResponse = UInt8(ascii: "N")
    static let notificationResponse = UInt8(ascii: "A")
    static let parseComplete = UInt8(ascii: "1")
    static let bindComplete = UInt8(ascii: "2")
    static let closeComplete = UInt8(ascii: "3")
    static let parameterDescription = UInt8(ascii: "t")
    static let rowDescription = UInt8(ascii: "T")
    static let noData = UInt8(ascii: "n")
    static let dataRow = UInt8(ascii: "D")
    static let commandComplete = UInt8(ascii: "C")
    static let emptyQueryResponse = UInt8(ascii: "I")
    static let portalSuspended = UInt8(ascii: "s")
    static let copyInResponse = UInt8(ascii: "G")
    static let copyOutResponse = UInt8(ascii: "H")
    static let copyBothResponse = UInt8(ascii: "W")
    static let copyData = UInt8(ascii: "d")
    static let copyDone = UInt8(ascii: "c")
    static let negotiateProtocolVersion = UInt8(ascii: "v")
}

/// Reads the fields of one backend message's body, front to back. Every
/// read checks the length: a short message is a protocol violation, never
/// a crash.
struct BodyReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    private func short(_ what: String) -> PostgresClientError {
        .protocolViolation("a message from the server ended before its \(what)")
    }

    mutating func byte() throws -> UInt8 {
        guard offset < bytes.count else { throw short("byte") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func int16() throws -> Int16 {
        guard offset + 2 <= bytes.count else { throw short("Int16") }
        defer { offset += 2 }
        return Int16(bitPattern: UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1]))
    }

    mutating func int32() throws -> Int32 {
        guard offset + 4 <= bytes.count else { throw short("Int32") }
        defer { offset += 4 }
        return Int32(bitPattern: UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16
            | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3]))
    }

    mutating func cString() throws -> String {
        var end = offset
        while end < bytes.count, bytes[end] != 0 { end += 1 }
        guard end < bytes.count else { throw short("string's NUL") }
        defer { offset = end + 1 }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[offset..<end]), as: UTF8.self)
    }

    mutating func take(_ count: Int) throws -> UnsafeRawBufferPointer {
        guard count >= 0, offset + count <= bytes.count else { throw short("\(count) bytes") }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
    }

    mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }
}

extension Backend {
    /// ErrorResponse and NoticeResponse: `code byte, string` pairs up to a
    /// NUL byte.
    static func fields(_ body: UnsafeRawBufferPointer) throws -> [Character: String] {
        var reader = BodyReader(body)
        var fields: [Character: String] = [:]
        while true {
            let code = try reader.byte()
            if code == 0 { break }
            fields[Character(Unicode.Scalar(code))] = try reader.cString()
        }
        return fields
    }

    /// RowDescription: the columns of the rows to come.
    static func rowDescription(_ body: UnsafeRawBufferPointer) throws -> [PostgresColumn] {
        var reader = BodyReader(body)
        let count = Int(UInt16(bitPattern: try reader.int16()))  // a count: never negative, whatever the bytes say
        var columns: [PostgresColumn] = []
        columns.reserveCapacity(count)
        for _ in 0..<count {
            let name = try reader.cString()
            let table = UInt32(bitPattern: try reader.int32())
            let attribute = try reader.int16()
            let type = UInt32(bitPattern: try reader.int32())
            _ = try reader.int16()  // typlen
            _ = try reader.int32()  // typmod
            _ = try reader.int16()  // format (0 until Bind chooses)
            columns.append(PostgresColumn(name: name, typeOID: type, tableOID: table, attributeNumber: attribute))
        }
        return columns
    }

    /// ParameterDescription: the types the server chose for `$1`, `$2`, ….
    static func parameterDescription(_ body: UnsafeRawBufferPointer) throws -> [UInt32] {
        var reader = BodyReader(body)
        let count = Int(UInt16(bitPattern: try reader.int16()))  // a count: never negative, whatever the bytes say
        return try (0..<count).map { _ in UInt32(bitPattern: try reader.int32()) }
    }

    /// DataRow: one value per column, decoded by the column's type and the
    /// format it was sent in.
    static func dataRow(_ body: UnsafeRawBufferPointer, columns: [PostgresColumn], binary: [Bool]) throws -> [PostgresValue] {
        var reader = BodyReader(body)
        let count = Int(UInt16(bitPattern: try reader.int16()))  // a count: never negative, whatever the bytes say
        guard count == columns.count else {
            throw PostgresClientError.protocolViolation("a row has \(count) values for \(columns.count) columns")
        }
        var row: [PostgresValue] = []
        row.reserveCapacity(count)
        for index in 0..<count {
            let length = Int(try reader.int32())
            if length < 0 {
                row.append(.null)
            } else {
                row.append(try PostgresValue.decode(try reader.take(length), type: columns[index].typeOID, binary: binary[index]))
            }
        }
        return row
    }
}
