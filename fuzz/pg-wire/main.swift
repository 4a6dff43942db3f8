import Glibc

// The server's side of a connection is the fuzzer's input (issue 25: a
// hostile server, or a man in the middle of a clear-text connection,
// controls every byte the client reads). The input is written to one end of
// a socket pair and the stream ended; PostgresConnection logs in on the
// other end (any authentication the bytes ask for, with a password to
// answer md5 and SCRAM), then runs a query and decodes every row it gets,
// then reads notifications. What must hold: no crash, no read outside a
// message (AddressSanitizer), no allocation a length field asks for ahead
// of the bytes (-malloc_limit_mb), every failure a thrown error.

private let url = try! PostgresURL("postgresql://fuzz:secret@/fuzz?host=/nonexistent&connect_timeout=5")

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    var ends: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &ends) == 0 else { return 0 }
    var room: Int32 = 4 << 20
    _ = setsockopt(ends[1], SOL_SOCKET, SO_SNDBUF, &room, socklen_t(MemoryLayout<Int32>.size))
    _ = setsockopt(ends[0], SOL_SOCKET, SO_RCVBUF, &room, socklen_t(MemoryLayout<Int32>.size))
    _ = setsockopt(ends[1], SOL_SOCKET, SO_RCVBUF, &room, socklen_t(MemoryLayout<Int32>.size))
    var written = 0
    while written < size {
        let count = write(ends[1], data + written, size - written)
        if count <= 0 { break }
        written += count
    }
    shutdown(ends[1], Int32(SHUT_WR))
    defer { close(ends[1]) }
    guard let connection = try? PostgresConnection(adopting: ends[0], url: url) else { return 0 }
    _ = try? connection.query("SELECT 1", []) { row in _ = try row.values() }
    _ = try? connection.query("SELECT 2", [.text("a"), .integer(1)]) { row in _ = try row.values() }
    _ = try? connection.waitForNotification(timeout: 0.001)
    connection.close()
    return 0
}
