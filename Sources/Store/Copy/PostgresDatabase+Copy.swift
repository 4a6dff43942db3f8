import Foundation
import PostgresWire

/// `db.copy` on PostgreSQL: COPY FROM STDIN (``PostgresConnection/copyIn(_:from:)``),
/// one statement under the session's rules as ``PostgresDatabase/execute(_:_:)``
/// runs any statement inside a transaction: in opsh's transaction (one of
/// its own outside one, so it is counted for the audit and checked by the
/// sandbox), under the statement savepoint `opsh_statement`, the server's
/// counters read around it in a measured transaction; `--read-only`'s
/// transaction is the server's to refuse it in ("cannot execute COPY FROM
/// in a read-only transaction").
extension PostgresDatabase {
    public func copy(_ request: CopyRequest) throws -> Int {
        try copy(request, reportingServerErrors: false)
    }

    /// As ``copy(_:)``, for a caller that words the server's refusal itself
    /// (`telemetry.insertMany`, an import): the server's error comes back
    /// as it is (its SQLSTATE, its constraint `n`, its context `W` naming
    /// the line: ``copyLine(of:)``), not placed as a ``CopyFailure`` in a
    /// Lua table or a file. The copy is rolled back to its savepoint
    /// either way: the transaction goes on.
    func copy(_ request: CopyRequest, reportingServerErrors: Bool) throws -> Int {
        // A script's copy with its search_path, opsh's own with the pinned one (PostgresOwnPath).
        try sending(request.namedByScript ? .script : .own) { try copyWithPath(request, reportingServerErrors: reportingServerErrors) }
    }

    private func copyWithPath(_ request: CopyRequest, reportingServerErrors: Bool) throws -> Int {
        try reconnectIfLost()
        statementCount += 1
        if depth > 0 { return try copyUnderSavepoint(request, reportingServerErrors) }
        return try transaction { try copyUnderSavepoint(request, reportingServerErrors) }
    }

    /// `COPY table (columns) FROM STDIN (FORMAT csv, HEADER …)`; the names
    /// are plain identifiers (``CopyRequest``), quoted as the server folds
    /// them unquoted (lower case), so that a column named by a keyword
    /// (schemes' `order`, which an import copies) is a name.
    ///
    /// With `home`, one of opsh's tables named unqualified is named in its
    /// schema (opsh's own copies: an import's, `telemetry.insertMany`'s,
    /// a restore's; ``PostgresHomeSchema``); a script's `db.copy` names
    /// its table as its SQL would.
    static func copyStatement(_ request: CopyRequest, home: PostgresHomeSchema? = nil) -> String {
        let columns = request.columns.isEmpty ? "" : " (\(request.columns.map(SQLDialect.postgresql.quote).joined(separator: ", ")))"
        var table = request.table.split(separator: ".").map { SQLDialect.postgresql.quote(String($0)) }.joined(separator: ".")
        if let home, !request.table.contains(".") { table = home.qualified(request.table) }
        var header = false
        if case let .csv(_, hasHeader) = request.source { header = hasHeader }
        let tab = request.delimiter == UInt8(ascii: "\t") ? ", DELIMITER E'\\t'" : ""
        return "COPY \(table)\(columns) FROM STDIN (FORMAT csv\(header ? ", HEADER true" : "")\(tab))"
    }

    private func copyUnderSavepoint(_ request: CopyRequest, _ reportingServerErrors: Bool) throws -> Int {
        guard connection.transactionStatus == .inTransaction else {
            throw dryRunning ? PostgresStoreError.dryRunEnded : PostgresStoreError.transactionEnded
        }
        let sql = Self.copyStatement(request, home: request.namedByScript ? nil : homeSchema)
        let sandboxCheck = try sandboxStep()
        let relations = measure != nil ? try tallyRelations() : nil
        // The counters before it, with its savepoint (the queued writes go first).
        let begun = try connection.pipeline([("SAVEPOINT opsh_statement", [])] + (relations.map { [CommitTally.step($0)] } ?? []))
        if let relations { measure?.read(CommitTally.counts(begun[1], relations)) }
        var feed = try CopyFeed(request)
        let result: PostgresResult
        do {
            result = try connection.copyIn(sql) { buffer in try feed.next(into: &buffer) }
            if let sandboxCheck {
                let checked = try connection.query(sandboxCheck.sql, sandboxCheck.parameters)
                if let baseline = sandboxBaseline { sandboxBaseline = PostgresSandbox.advanced(baseline, by: checked.rows.first ?? []) }
            }
        } catch {
            sandboxBaseline = nil
            try rollBackCopy(relations)
            if let failure = error as? PostgresError {
                if sandboxCheck != nil, let refusal = PostgresSandbox.refusal(in: failure), failure.sql == sandboxCheck?.sql {
                    throw PostgresStoreError.sandboxRefused(PostgresSandbox.message(refusal), sql: sql)
                }
                throw reportingServerErrors ? TransactionControl.reported(failure, sql) : Self.copyFailure(failure, request)
            }
            throw error
        }
        let readsAfter = relations != nil && (dryRunning || countsFailedStatementsExactly)
        let released = try connection.pipeline([("RELEASE SAVEPOINT opsh_statement", [])]
                                               + (readsAfter ? [CommitTally.stepOnceWritten(relations!)] : []))
        if let relations, readsAfter, !released[1].rows.isEmpty { measure?.read(CommitTally.counts(released[1], relations)) }
        return result.affectedRows ?? 0
    }

    private func rollBackCopy(_ relations: CommitTally.Relations?) throws {
        guard connection.isOpen, connection.transactionStatus != .idle else { return }
        if let relations, measure != nil {
            let after = try connection.pipeline([("ROLLBACK TO SAVEPOINT opsh_statement", []),
                                                 ("RELEASE SAVEPOINT opsh_statement", []), CommitTally.step(relations)])
            measure?.rolledBack(to: CommitTally.counts(after[2], relations))
        } else {
            try connection.simpleQuery("ROLLBACK TO SAVEPOINT opsh_statement; RELEASE SAVEPOINT opsh_statement")
        }
    }

    /// The server's refusal of a row, placed as the user finds it: its
    /// context (`COPY builds, line 3, column n: "x"`) gives the line of the
    /// data, which is the line of the file, or the row of the Lua table
    /// (one line each).
    static func copyFailure(_ error: PostgresError, _ request: CopyRequest) -> Error {
        guard let (line, afterLine) = copyLine(of: error) else { return TransactionControl.reported(error, copyStatement(request)) }
        var place = request.place(line)
        if afterLine.hasPrefix(", column ") {
            let column = afterLine.dropFirst(", column ".count).prefix { $0 != ":" }
            place += ", column \(column)"
        }
        return CopyFailure("\(place): \(error.message) (SQLSTATE \(error.code))")
    }

    /// The line of the copy's data the server refused (1-based), from its
    /// context (`COPY builds, line 3, column n: "x"`), and what follows the
    /// number; nil when the error is not about a line.
    static func copyLine(of error: PostgresError) -> (line: Int, rest: Substring)? {
        guard let context = error.fields["W"], let range = context.range(of: ", line ") else { return nil }
        let rest = context[range.upperBound...]
        guard let line = Int(rest.prefix { $0.isNumber }) else { return nil }
        return (line, rest.drop { $0.isNumber })
    }
}

/// The data of a copy, piece by piece: the Lua rows written as CSV, or the
/// file's bytes as they are.
struct CopyFeed {
    private var rows: [[StoreValue]] = []
    private var nextRow = 0
    private var file: FileHandle?
    private var progress: CopyProgress?
    private var sent = 0, size = 0
    static let pieceSize = 256 * 1024

    init(_ request: CopyRequest) throws {
        switch request.source {
        case let .rows(given):
            rows = given
            let width = request.columns.isEmpty ? given.first?.count ?? 0 : request.columns.count
            for (index, row) in given.enumerated() where row.count != width {
                if row.count < width, !request.columns.isEmpty {
                    let column = request.columns[row.count]
                    throw CopyFailure("row \(index + 1), column \(column): missing data for column \"\(column)\"")
                }
                throw CopyFailure("row \(index + 1): \(row.count) values, expected \(width)")
            }
        case let .csv(path, _):
            guard let handle = FileHandle(forReadingAtPath: path) else { throw CopyFailure("cannot read \(path)") }
            file = handle
            progress = request.progress
            size = (try? handle.seekToEnd()).map(Int.init) ?? 0
            try? handle.seek(toOffset: 0)
        }
    }

    /// Appends the next piece; false once it appended the last.
    mutating func next(into buffer: inout [UInt8]) throws -> Bool {
        if let file {
            let data = try file.read(upToCount: Self.pieceSize) ?? Data()
            buffer.append(contentsOf: data)
            sent += data.count
            progress?.report(sent, size)
            if data.isEmpty { try? file.close() }
            return !data.isEmpty
        }
        let start = buffer.count
        nextRow = try CSVWriter.append(rows, from: nextRow, into: &buffer, limit: start + Self.pieceSize)
        return nextRow < rows.count
    }
}
