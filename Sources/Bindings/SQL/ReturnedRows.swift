import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store

/// How a batch run (`opsh --csv|--tsv -e`, `opsh run`) writes rows it
/// returns straight from the statement: the printer's rules, given by the
/// shell (`DelimitedText`), so these bytes are the bytes the printer would
/// write from a row set (BENCHMARKS.md, issue 26's export).
public struct ReturnedRowsFormat: Sendable {
    /// Tab-separated (PostgreSQL's text format) rather than CSV.
    public let tsv: Bool
    /// The header line's fields for these column names, without the newline.
    public let header: @Sendable ([String]) -> [UInt8]
    /// The field for a text the C writer does not write itself (not
    /// printable ASCII, or a secret's mask): control characters shown.
    public let field: @Sendable (String) -> [UInt8]

    public init(tsv: Bool, header: @escaping @Sendable ([String]) -> [UInt8], field: @escaping @Sendable (String) -> [UInt8]) {
        self.tsv = tsv
        self.header = header
        self.field = field
    }
}

/// `return db.query(…)` in a batch run with `--csv` or `--tsv`: when that
/// call's result is the chunk's own returned value (a tail call of the
/// outermost function, `opsh_is_chunk_result`), nothing but the printer
/// would ever read its rows, so they go from the statement to stdout
/// without a Lua table per row; the call returns a value the printer
/// writes nothing for. Any other call (a result kept in a local, a
/// query inside a function the chunk calls, a write, PostgreSQL's row
/// path) builds its rows as always. A step that fails midway ends the run
/// with the statement's error after the rows already written; a write
/// that fails says so.
public enum ReturnedRows {
    /// Whether the value at `index` stands for rows already written.
    public static func areWritten(_ state: OpaquePointer, at index: Int32) -> Bool {
        opsh_is_rows_written(state, index) != 0
    }

    /// Label of the progress shown on stderr past two seconds.
    static let progressLabel = "export"
}

/// One statement's rows on their way out; the C writer's context.
final class ReturnedRowsWriter {
    let format: ReturnedRowsFormat
    let secret: [Bool]
    /// Drawn on stderr from two seconds on, when stderr is a terminal and
    /// stdout is not (the rows would cross the bar's line).
    let progress: ProgressBar?

    init(format: ReturnedRowsFormat, columns: [String]) {
        self.format = format
        secret = columns.map(SecretMask.isSecret)
        progress = isatty(STDOUT_FILENO) == 1 ? nil : ProgressBar(label: ReturnedRows.progressLabel, unit: "rows", delay: 2)
    }

    /// Writes every row of the bound `statement` to stdout; returns the
    /// rows written.
    func write(_ statement: OpaquePointer, columns: [String], failure: () -> SQLFailure) throws -> Int64 {
        fflush(nil)
        let header = format.header(columns)
        let delegated = secret.map { UInt8($0 ? 1 : 0) }
        defer { progress?.clear() }
        let context = Unmanaged.passUnretained(self).toOpaque()
        return try delegated.withUnsafeBufferPointer { delegatedColumns in
            var writer = opsh_rows_writer()
            writer.descriptor = STDOUT_FILENO
            writer.tsv = format.tsv ? 1 : 0
            writer.delegated = delegatedColumns.baseAddress
            writer.context = context
            writer.other = { context, bytes, length, column, out in
                let this = Unmanaged<ReturnedRowsWriter>.fromOpaque(context!).takeUnretainedValue()
                var text = bytes.map { String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self) } ?? ""
                if this.secret[Int(column)] { text = SecretMask.mask(text) }
                return this.format.field(text).withUnsafeBytes { opsh_byte_buffer_append(out, $0.baseAddress, $0.count) }
            }
            if progress != nil {
                writer.progress = { context, rows in
                    Unmanaged<ReturnedRowsWriter>.fromOpaque(context!).takeUnretainedValue().progress?.update(completed: Int(rows))
                }
            }
            let code = header.withUnsafeBufferPointer { opsh_write_returned_rows(statement, $0.baseAddress, $0.count, &writer) }
            if code == OPSH_SQLITE_DONE { return writer.rows }
            if code != -1 { throw failure() }
            let reason = writer.write_error == 0 ? "out of memory" : String(cString: strerror(writer.write_error))
            throw LuaCallError.message("cannot write the rows to standard output after \(writer.rows) rows: \(reason)")
        }
    }
}

extension SQLExecutor {
    /// Writes the rows of the `db.query` call when its result is the
    /// chunk's returned value (``ReturnedRows``); nil: the call runs as
    /// always (not armed, not the chunk's result, not a read, or a
    /// statement that does not prepare, whose error the usual path gives).
    func writeReturnedRows(call: LuaCall) throws -> Int32? {
        guard let format = returnedRows, lua_type(call.state, 1) == LUA_TSTRING,
              opsh_is_chunk_result(call.state, &chunkResultCache) != 0 else { return nil }
        if let current = session.transactionConnection {
            return try writeReturnedRows(on: current.handle, call: call, format: format)
        }
        guard let readConnection else { return nil }
        try readConnection.ready()
        return try readConnection.lending { handle -> Int32? in
            try writeReturnedRows(on: handle, call: call, format: format) {
                readConnection.useSnapshot(writeCount: session.writeCount)
            }
        }
    }

    private func writeReturnedRows(on handle: OpaquePointer, call: LuaCall, format: ReturnedRowsFormat,
                                   beforeStep: () -> Void = {}) throws -> Int32? {
        let entry: StatementCache.Entry
        do {
            entry = try statements.statement(for: call.state, at: 1, on: handle)
        } catch is SQLFailure {
            return nil
        }
        let statement = entry.statement
        guard entry.isReadonly, opsh_sqlite_column_count(statement) > 0 else { return nil }
        beforeStep()
        defer { opsh_sqlite_reset_and_clear(statement) }
        try StatementBridge.bind(statement, call: call, from: 2, markers: markers)
        let columns = StatementBridge.columnNames(statement)
        _ = try ReturnedRowsWriter(format: format, columns: columns).write(statement, columns: columns) {
            SQLFailure(message: String(cString: opsh_sqlite_errmsg(handle)), sql: entry.sql)
        }
        opsh_push_rows_written(call.state)
        return 1
    }
}
