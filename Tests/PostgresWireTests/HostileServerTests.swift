import Foundation
import Glibc
import Testing
@testable import PostgresWire

/// What a hostile server (or a man in the middle of a clear-text
/// connection) sends the client: found by the `pg-wire` fuzz target
/// (fuzz/README.md), each now an error the caller can catch, not a trap.
/// The server is played by the test on the other end of a socket pair.
@Suite struct HostileServerTests {
    static func message(_ type: Character, _ body: [UInt8]) -> [UInt8] {
        let length = UInt32(body.count + 4)
        return [UInt8(ascii: type.unicodeScalars.first!)] + withUnsafeBytes(of: length.bigEndian, Array.init) + body
    }

    static let loggedIn = message("R", [0, 0, 0, 0]) + message("Z", Array("I".utf8))

    /// A connection whose server sends `stream` and then ends it.
    static func connection(hearing stream: [UInt8]) throws -> PostgresConnection {
        var ends: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &ends) == 0)
        let written = stream.withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) }
        #expect(written == stream.count)
        shutdown(ends[1], Int32(SHUT_WR))
        defer { close(ends[1]) }
        return try PostgresConnection(adopting: ends[0], url: PostgresURL("postgresql://fuzz@/fuzz?host=/nonexistent"))
    }

    /// A RowDescription whose column count reads as negative (0xFFFF):
    /// the fuzzer's first finding, a trap in `Backend.rowDescription`.
    @Test func aColumnCountOf0xFFFFIsAProtocolErrorNotATrap() throws {
        let connection = try Self.connection(hearing: Self.loggedIn + Self.message("1", []) + Self.message("T", [0xFF, 0xFF]))
        #expect(throws: PostgresClientError.self) { try connection.query("SELECT 1") }
    }

    /// A message that claims to be 1 GB long is not allocated ahead of its
    /// bytes; one of a kind that is never long (ReadyForQuery) and claims
    /// more than 30,000 bytes is refused at once, as libpq does.
    @Test func aLengthFieldAllocatesNothingAheadOfTheBytes() throws {
        let claims1GB: [UInt8] = [UInt8(ascii: "D"), 0x3F, 0xFF, 0xFF, 0xFF] + Array(repeating: 0, count: 64)
        let connection = try Self.connection(hearing: Self.loggedIn + Self.message("1", []) + claims1GB)
        #expect(throws: PostgresClientError.self) { try connection.query("SELECT 1") }
        let long: [UInt8] = [UInt8(ascii: "Z"), 0x00, 0x01, 0x00, 0x00]
        let refused = #expect(throws: PostgresClientError.self) { try Self.connection(hearing: Self.message("R", [0, 0, 0, 0]) + long) }
        #expect("\(refused.map { "\($0)" } ?? "")".contains("claims a length of 65536 bytes"))
    }
}
