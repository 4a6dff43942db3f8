import Glibc

/// The bytes read from the server and not yet consumed, cut into messages.
///
/// One buffer, allocated once and grown only for a message larger than it
/// (a wide row, a large bytea): reading 200,000 rows does not allocate per
/// row. A message's body is handed out as a pointer into this buffer, valid
/// until the next read: callers decode it before they ask for the next
/// message.
final class Inbox {
    private var storage: UnsafeMutableRawPointer
    private var capacity: Int
    private var start = 0
    private var end = 0

    init(capacity: Int = 65_536) {
        self.capacity = capacity
        storage = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
    }

    deinit { storage.deallocate() }

    /// The next complete message already in the buffer, or nil when more
    /// bytes must be read first.
    func nextFrame() throws -> (type: UInt8, body: UnsafeRawBufferPointer)? {
        guard end - start >= 5 else { return nil }
        let header = storage + start
        let length = Int(header.load(fromByteOffset: 1, as: UInt8.self)) << 24
            | Int(header.load(fromByteOffset: 2, as: UInt8.self)) << 16
            | Int(header.load(fromByteOffset: 3, as: UInt8.self)) << 8
            | Int(header.load(fromByteOffset: 4, as: UInt8.self))
        guard length >= 4 else {
            throw PostgresClientError.protocolViolation("a message of type \(header.load(as: UInt8.self)) claims a length of \(length)")
        }
        // A length is the server's word, not a reason to allocate: only the
        // messages that may be long (rows, copy data, errors, notices,
        // notifications, row and parameter descriptions, copy responses,
        // function results) may exceed
        // 30,000 bytes (libpq's rule), none the server's 1 GB limit; and the
        // buffer grows as the bytes arrive (``fill(from:)``), never ahead of them.
        let type = header.load(as: UInt8.self)
        guard length <= Self.largestMessage, length <= 30_000 || Self.mayBeLong.contains(type) else {
            throw PostgresClientError.protocolViolation("a message of type \(Character(Unicode.Scalar(type))) claims a length of \(length) bytes")
        }
        guard end - start >= 1 + length else {
            reserve(min(1 + length, capacity))
            return nil
        }
        let body = UnsafeRawBufferPointer(start: header + 5, count: length - 4)
        start += 1 + length
        if start == end {
            // Empty: the next read starts at the front. The body just handed
            // out stays intact until that read.
            start = 0
            end = 0
        }
        return (type, body)
    }

    /// PostgreSQL's largest allocation (MaxAllocSize, 1 GB - 1): no message is longer.
    static let largestMessage = 0x3FFF_FFFF
    /// The types libpq lets exceed 30,000 bytes (T D d V E N A), and those
    /// whose size grows with a statement's parameters or a COPY's columns
    /// (t, G, H, W: 4 or 2 bytes for each of up to 65,535).
    static let mayBeLong: Set<UInt8> = Set("TDdVENAtGHW".utf8)

    /// Makes room for a message of `total` bytes from `start`: moves the
    /// unread bytes to the front, and grows the buffer if it is too small.
    private func reserve(_ total: Int) {
        if total > capacity {
            let larger = UnsafeMutableRawPointer.allocate(byteCount: max(total, capacity * 2), alignment: 8)
            larger.copyMemory(from: storage + start, byteCount: end - start)
            storage.deallocate()
            storage = larger
            capacity = max(total, capacity * 2)
            end -= start
            start = 0
        } else if capacity - start < total {
            memmove(storage, storage + start, end - start)
            end -= start
            start = 0
        }
    }

    /// Reads once from `socket` (blocking until something arrives).
    func fill(from socket: Socket) throws {
        if end == capacity {
            if start > 0 {
                memmove(storage, storage + start, end - start)
                end -= start
                start = 0
            } else {
                reserve(capacity + 1)
            }
        }
        end += try socket.receive(into: UnsafeMutableRawBufferPointer(start: storage + end, count: capacity - end))
    }

    var isEmpty: Bool { start == end }

    /// Whether an ErrorResponse is among the complete messages read and
    /// not yet consumed (a COPY the server refused while the data was
    /// still being sent). Consumes nothing.
    var hasErrorResponse: Bool {
        var at = start
        while end - at >= 5 {
            let header = storage + at
            let length = Int(header.load(fromByteOffset: 1, as: UInt8.self)) << 24
                | Int(header.load(fromByteOffset: 2, as: UInt8.self)) << 16
                | Int(header.load(fromByteOffset: 3, as: UInt8.self)) << 8
                | Int(header.load(fromByteOffset: 4, as: UInt8.self))
            guard length >= 4, end - at >= 1 + length else { return false }
            if header.load(as: UInt8.self) == UInt8(ascii: "E") { return true }
            at += 1 + length
        }
        return false
    }

    /// Drops what is unread: a new connection starts from nothing.
    func reset() {
        start = 0
        end = 0
    }
}
