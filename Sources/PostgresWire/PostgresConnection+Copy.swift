/// COPY FROM STDIN: the COPY IN sub-protocol (CopyInResponse, CopyData,
/// CopyDone, CopyFail) on the simple protocol.
extension PostgresConnection {
    /// Runs `sql`, a `COPY … FROM STDIN`, and sends the data `source`
    /// hands out: each call appends the next piece (any split: the server
    /// joins them; about 64 KiB a piece keeps the writes large) and returns
    /// false once it appended the last one.
    ///
    /// The server reads the data as it arrives, in one statement: it keeps
    /// every row or none. An error it reports while the data is still being
    /// sent (a malformed row) stops the sending at once: `source` is not
    /// called again and the server's error is thrown, with its `CONTEXT`
    /// (``PostgresError/fields`` `W`: `COPY t, line 3, column n: "x"`)
    /// naming the line of the data. If `source` throws, a CopyFail tells
    /// the server, which drops what it received, and `source`'s error is
    /// thrown. The connection stays usable either way; inside a
    /// transaction block a failed COPY leaves it `.failed` as any failed
    /// statement does.
    ///
    /// - Returns: the result, whose command tag (`COPY 1000`) tells how
    ///   many rows were written.
    /// - Throws: ``PostgresError`` when the statement is not a COPY FROM
    ///   STDIN the server accepts (no such table, a read-only transaction)
    ///   or a row is refused; ``PostgresClientError/unsupported(_:)`` when
    ///   `sql` starts another kind of COPY.
    @discardableResult
    public func copyIn(_ sql: String, from source: (inout [UInt8]) throws -> Bool) throws -> PostgresResult {
        try checkUsable(sql)
        let (result, copied) = try exchange { () throws -> (PostgresResult, Bool) in
            startOutbox()
            Frontend.query(sql, into: &outbox)
            cyclesInOutbox += 1
            try send(includingCloses: false)
            var failure: [Character: String]? = nil
            var sourceFailure: Error? = nil
            var tag = ""
            var copying = false
            while true {
                let (type, body) = try nextMessage()
                switch type {
                case Backend.copyInResponse:
                    copying = true
                    sourceFailure = try sendData(from: source)
                case Backend.copyOutResponse, Backend.copyData, Backend.copyDone:
                    // A COPY TO STDOUT: its data is read and dropped, as in
                    // simpleQuery, and it is refused below.
                    break
                case Backend.commandComplete:
                    var reader = BodyReader(body)
                    tag = try reader.cString()
                case Backend.errorResponse:
                    if failure == nil { failure = try Backend.fields(body) }
                case Backend.rowDescription, Backend.dataRow, Backend.emptyQueryResponse:
                    break
                default:
                    guard try finishCycle(type, body) else { continue }
                    if let sourceFailure { throw sourceFailure }
                    if let failure { throw PostgresError(fields: failure, sql: sql) }
                    return (PostgresResult(columns: [], rows: [], commandTag: tag), copying)
                }
            }
        }
        // (Outside the exchange: the connection is fine, it only ran something else.)
        guard copied else {
            throw PostgresClientError.unsupported("copyIn runs a COPY … FROM STDIN; the server ran \(result.commandTag.isEmpty ? "no COPY" : result.commandTag)")
        }
        return result
    }

    /// The data, piece by piece, then CopyDone; or CopyFail when `source`
    /// throws (its error is returned, to throw after the server's
    /// ReadyForQuery). Stops early when the server already reported an
    /// error: it drops the rest unread, and nothing it received counts.
    private func sendData(from source: (inout [UInt8]) throws -> Bool) throws -> Error? {
        var more = true
        while more {
            outbox.removeAll(keepingCapacity: true)
            outbox.append(UInt8(ascii: "d"))
            outbox.append(contentsOf: [0, 0, 0, 0])
            do {
                more = try source(&outbox)
            } catch {
                outbox.removeAll(keepingCapacity: true)
                Frontend.copyFail("the client stopped the copy: \(error)", into: &outbox)
                try send(includingCloses: false)
                return error
            }
            let length = UInt32(outbox.count - 1)
            guard length > 4 else { continue }
            outbox[1] = UInt8(truncatingIfNeeded: length >> 24)
            outbox[2] = UInt8(truncatingIfNeeded: length >> 16)
            outbox[3] = UInt8(truncatingIfNeeded: length >> 8)
            outbox[4] = UInt8(truncatingIfNeeded: length)
            try send(includingCloses: false)
            // The server answers during the copy only to refuse it (or with
            // a notice): then what is still unsent would be dropped anyway.
            if let socket, try socket.poll(timeout: 0) {
                try inbox.fill(from: socket)
                if inbox.hasErrorResponse { return nil }
            }
        }
        outbox.removeAll(keepingCapacity: true)
        Frontend.copyDone(into: &outbox)
        try send(includingCloses: false)
        return nil
    }
}
