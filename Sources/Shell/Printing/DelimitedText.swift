import Bindings
import CLuaShim
import Store
import TextCodec

/// A row set as CSV or TSV (`.mode csv|tsv`, `--csv`, `--tsv`): a header
/// line, then a line per row, written straight from the Lua rows' bytes.
/// Every row is written (a file or a pipe gets them all), so this is the
/// path that must keep up with `sqlite3 -csv`: no cell values are built,
/// ASCII text is copied as it is.
///
/// CSV as RFC 4180: a field holding `,`, `"` or a line break is quoted,
/// `"` doubled. TSV as PostgreSQL's text format: `\t`, `\n`, `\r` and `\`
/// inside a value written `\t`, `\n`, `\r`, `\\`. NULL is an empty field in
/// both. Other control characters show as `VisibleText` shows them, as
/// everywhere opsh prints text.
struct DelimitedText {
    enum Format {
        case csv, tsv

        var separator: UInt8 { self == .csv ? UInt8(ascii: ",") : UInt8(ascii: "\t") }
    }

    let format: Format
    /// The text of a cell that is neither text, a number nor NULL (a table,
    /// a boolean), and of text that is not plain ASCII: the caller's.
    let otherCell: (_ row: Int32, _ column: String) -> TableFormatter.Cell

    /// The row set at `index` with `columns`; stops early on Ctrl-C.
    func render(_ state: OpaquePointer, _ index: Int32, columns: [String]) -> String {
        let rows = lua_absindex(state, index)
        var out: [UInt8] = []
        out.reserveCapacity(Int(lua_rawlen(state, rows)) * 16 * max(1, columns.count))
        for (offset, column) in columns.enumerated() {
            if offset > 0 { out.append(format.separator) }
            text(Array(column.utf8), into: &out)
        }
        out.append(UInt8(ascii: "\n"))
        guard lua_checkstack(state, Int32(columns.count) + 4) != 0 else { return String(decoding: out, as: UTF8.self) }
        // A secret's value is masked by the caller's cell.
        let secret = columns.map { SecretMask.isSecret($0) }
        // The column names on the stack once: each cell is a raw lookup.
        let names = lua_gettop(state) + 1
        for column in columns { LuaInspection.pushString(state, column) }
        defer { opsh_pop(state, Int32(columns.count)) }
        var position: lua_Integer = 1
        while lua_rawgeti(state, rows, position) == LUA_TTABLE {
            let row = lua_gettop(state)
            for offset in columns.indices {
                if offset > 0 { out.append(format.separator) }
                lua_pushvalue(state, names + Int32(offset))
                lua_rawget(state, row)
                if secret[offset] {
                    other(otherCell(row, columns[offset]), into: &out)
                } else {
                    cell(state, row: row, column: columns[offset], into: &out)
                }
                opsh_pop(state, 1)
            }
            out.append(UInt8(ascii: "\n"))
            opsh_pop(state, 1)
            position += 1
            if position % 1024 == 0 && PrintCancellation.isRequested { break }
        }
        opsh_pop(state, 1)
        if out.last == UInt8(ascii: "\n") { out.removeLast() }
        return String(decoding: out, as: UTF8.self)
    }

    /// Rows already read (a single row, a set cut by `.rows`).
    func render(columns: [String], cells: [[TableFormatter.Cell]]) -> String {
        var out: [UInt8] = []
        for (offset, column) in columns.enumerated() {
            if offset > 0 { out.append(format.separator) }
            text(Array(column.utf8), into: &out)
        }
        for row in cells {
            out.append(UInt8(ascii: "\n"))
            for (offset, cell) in row.enumerated() {
                if offset > 0 { out.append(format.separator) }
                other(cell, into: &out)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The same rules for rows a batch run writes straight from the
    /// statement (Bindings' ``ReturnedRows``): its header line, and the
    /// field of a text that is not printable ASCII (or a secret's mask).
    static func returnedRows(_ mode: OutputMode) -> ReturnedRowsFormat? {
        guard mode == .csv || mode == .tsv else { return nil }
        let format: Format = mode == .tsv ? .tsv : .csv
        return ReturnedRowsFormat(tsv: mode == .tsv, header: { columns in
            let writer = DelimitedText(format: format) { _, _ in .null }
            var out: [UInt8] = []
            for (offset, column) in columns.enumerated() {
                if offset > 0 { out.append(writer.format.separator) }
                writer.text(Array(column.utf8), into: &out)
            }
            return out
        }, field: { text in
            let writer = DelimitedText(format: format) { _, _ in .null }
            var out: [UInt8] = []
            writer.other(.text(text), into: &out)
            return out
        })
    }

    /// The value on top of the stack, a cell of `row`.
    private func cell(_ state: OpaquePointer, row: Int32, column: String, into out: inout [UInt8]) {
        switch lua_type(state, -1) {
        case LUA_TNIL:
            return
        case LUA_TNUMBER where lua_isinteger(state, -1) != 0:
            Self.append(opsh_tointeger(state, -1, nil), to: &out)
        case LUA_TNUMBER:
            // Lua's own text for a float (`tostring`), on a copy: converting
            // the value in place would turn the cell into a string.
            lua_pushvalue(state, -1)
            var length = 0
            if let pointer = opsh_tostring(state, -1, &length) {
                out.append(contentsOf: UnsafeRawBufferPointer(start: pointer, count: length))
            }
            opsh_pop(state, 1)
        case LUA_TSTRING:
            var length = 0
            guard let pointer = opsh_tostring(state, -1, &length) else { return }
            let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
            if bytes.allSatisfy({ $0 < 0x80 }) {
                text(bytes, into: &out)
            } else {
                other(otherCell(row, column), into: &out)
            }
        default:
            other(otherCell(row, column), into: &out)
        }
    }

    private func other(_ cell: TableFormatter.Cell, into out: inout [UInt8]) {
        switch cell {
        case .null: return
        case let .number(text): out.append(contentsOf: text.utf8)
        case let .text(text): self.text(Array(VisibleText.of(text, keepingNewlines: true).utf8), into: &out)
        }
    }

    /// Text as a field: quoted or escaped as the format says. ASCII
    /// control characters other than tab and newline are replaced by
    /// their pictures (the text is then no longer ASCII).
    private func text<Bytes: Collection>(_ bytes: Bytes, into out: inout [UInt8]) where Bytes.Element == UInt8 {
        let controls = bytes.contains { byte in (byte < 0x20 && byte != Self.tab && byte != Self.newline) || byte == 0x7F }
        if controls {
            let shown = VisibleText.of(String(decoding: Array(bytes), as: UTF8.self), keepingNewlines: true)
            return plain(Array(shown.utf8), into: &out)
        }
        plain(bytes, into: &out)
    }

    private static let quote = UInt8(ascii: "\""), comma = UInt8(ascii: ","), backslash = UInt8(ascii: "\\")
    private static let tab: UInt8 = 0x09, newline: UInt8 = 0x0A, carriageReturn: UInt8 = 0x0D

    private func plain<Bytes: Collection>(_ bytes: Bytes, into out: inout [UInt8]) where Bytes.Element == UInt8 {
        switch format {
        case .csv:
            let quoted = bytes.contains { byte in
                byte == Self.comma || byte == Self.quote || byte == Self.newline || byte == Self.carriageReturn
            }
            guard quoted else { return out.append(contentsOf: bytes) }
            out.append(Self.quote)
            for byte in bytes {
                if byte == Self.quote { out.append(byte) }
                out.append(byte)
            }
            out.append(Self.quote)
        case .tsv:
            let escaped = bytes.contains { byte in
                byte == Self.tab || byte == Self.newline || byte == Self.carriageReturn || byte == Self.backslash
            }
            guard escaped else { return out.append(contentsOf: bytes) }
            for byte in bytes {
                let letter: UInt8
                switch byte {
                case Self.tab: letter = UInt8(ascii: "t")
                case Self.newline: letter = UInt8(ascii: "n")
                case Self.carriageReturn: letter = UInt8(ascii: "r")
                case Self.backslash: letter = Self.backslash
                default:
                    out.append(byte)
                    continue
                }
                out.append(Self.backslash)
                out.append(letter)
            }
        }
    }

    /// An integer's decimal digits, without a String.
    static func append(_ value: Int64, to out: inout [UInt8]) {
        if value == .min { return out.append(contentsOf: String(value).utf8) }
        var magnitude = value < 0 ? -value : value
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            for index in stride(from: count - 1, through: 0, by: -1) { out.append(buffer[index]) }
        }
    }
}

extension OutputMode {
    /// How a batch run writes rows it returns straight from the statement
    /// in this mode (``DelimitedText``'s rules); nil: the printer writes them.
    public var returnedRowsFormat: ReturnedRowsFormat? { DelimitedText.returnedRows(self) }
}
