import Bindings
import CLuaShim
import Foundation
import Store
import TextCodec

/// How the shell shows values (`.mode`, `--json`).
public enum OutputMode: String, CaseIterable, Sendable {
    /// Row sets as aligned tables, other tables as Lua literals.
    case table
    /// Row sets one record at a time, a line per column, values whole
    /// (psql's `\x`).
    case line
    /// One JSON document per value.
    case json
    /// Row sets as CSV with a header line.
    case csv
    /// Row sets as tab-separated values with a header line (PostgreSQL's
    /// text format: tab, newline and backslash in a value escaped).
    case tsv
    /// Everything as Lua literals.
    case lua
}

/// Turns the values a chunk returned (still on the Lua stack, so their
/// metatables can be read) into text: row sets (`opsh.rows`) as tables,
/// other tables as readable Lua literals with sorted keys, cycles marked
/// and depth limited, secrets masked.
public struct ValuePrinter {
    public var mode: OutputMode
    /// Box-drawing characters and `∅`, or ASCII and `NULL`.
    public var unicode: Bool
    /// Show the numbers of columns the schema declares as seconds since
    /// 1970 (the `dates` of a row's metatable: ``RowShapes``,
    /// ``DeclaredTimeColumns``) as UTC times in `.mode table` and `line`;
    /// a column's name decides nothing (`42 AS endDate` is a number).
    public var readableDates = true
    /// Nesting shown before `{…}`.
    public var maximumDepth = 6
    /// Elements of one table shown before `…`.
    public var maximumItems = 200
    /// Widest a table column may be before values are cut; nil: the
    /// columns share the terminal's width, whatever it is.
    public var maximumColumnWidth: Int?
    /// Rows of a row set shown in `.mode table` and `line` before a note
    /// says how many there were (the shell's `.rows`); nil: all.
    public var maximumRows: Int?
    /// Bytes of one value read for `.mode line` (a table reads only what
    /// its column shows): formatting costs what is shown, not what is
    /// stored.
    public var maximumValueBytes = 4096
    /// Tables are narrowed to fit this many columns; nil: no limit (a
    /// file). Setting it stops ``widthFollowsTerminal``.
    public var totalWidth: Int? {
        didSet { widthFollowsTerminal = false }
    }
    /// Read the terminal's width on stdout each time a value is shown (so
    /// a window resized between two results is seen) instead of
    /// ``totalWidth``. `.output FILE` turns it off.
    public var widthFollowsTerminal = true
    /// The chunk was a `db.exec` call typed at the prompt: its values (the
    /// rows changed, SQLite's last rowid) are not shown, the prompt says
    /// what the write did instead (``WriteAtThePrompt``).
    var leavesWriteValuesToThePrompt = false
    /// At the prompt: a row that carries its own line (a build `jobs.start`
    /// or `jobs.follow` returned, ``PromptSummary``) shows that line in
    /// `.mode table` and `line`; scripts' output shows the row.
    public var showsPromptSummaries = false

    /// The width tables are narrowed to now.
    var currentWidth: Int? { widthFollowsTerminal ? Terminal.width(descriptor: 1) : totalWidth }

    public init(mode: OutputMode = .table, unicode: Bool = true) {
        self.mode = mode
        self.unicode = unicode
    }

    /// The text for `count` values from `first` on the stack of `state`,
    /// or nil when there are none.
    ///
    /// - throws: ``PrintError`` when JSON cannot represent a value.
    public func render(_ state: OpaquePointer, first: Int32, count: Int32) throws -> String? {
        guard count > 0 else { return nil }
        // A batch run's returned rows, written already as they were read.
        if count == 1, ReturnedRows.areWritten(state, at: first) { return nil }
        if leavesWriteValuesToThePrompt, count <= 2,
           (first..<(first + count)).allSatisfy({ lua_isinteger(state, $0) != 0 }) {
            return nil
        }
        PrintCancellation.reset()
        let lua = LuaInspection(state: state)
        guard lua_checkstack(state, 40) != 0 else { throw PrintError("stack overflow while printing") }
        var pieces: [String] = []
        var allScalar = true
        for index in first..<(first + count) {
            switch mode {
            case .json:
                let place = count == 1 ? "$" : "$[\(index - first + 1)]"
                do {
                    pieces.append(try LuaJSONWriter.display(state, at: index, place: place))
                } catch let failure as LuaJSONWriter.Failure {
                    throw PrintError(failure.message)
                }
            case .table, .line, .csv, .tsv, .lua:
                if let summary = promptSummary(state, at: index) {
                    if !summary.isEmpty { pieces.append(summary) }
                    continue
                }
                if lua.type(index) == LUA_TTABLE && lua.metatableName(index) != "opsh.NULL" {
                    allScalar = false
                }
                pieces.append(text(lua, index))
            }
        }
        if pieces.isEmpty { return nil }
        // One value (`opsh -e 'return 1'`): its text as it is. The generic
        // `joined` looks Array's associated types up at run time the first
        // time, a scan of every conformance record of the executable
        // (ARCHITECTURE.md, "Start-up").
        if pieces.count == 1 { return pieces[0] }
        if mode != .json && allScalar { return pieces.joined(separator: "\t") }
        return pieces.joined(separator: "\n")
    }

    /// The line a row carries for the prompt (``PromptSummary``), when the
    /// prompt shows it: nil for every other value.
    private func promptSummary(_ state: OpaquePointer, at index: Int32) -> String? {
        guard showsPromptSummaries, mode == .table || mode == .line, lua_type(state, index) == LUA_TTABLE,
              lua_getmetatable(state, index) != 0 else { return nil }
        LuaInspection.pushString(state, PromptSummary.field)
        let type = lua_rawget(state, -2)
        defer { opsh_pop(state, 2) }
        guard type == LUA_TSTRING, let text = LuaInspection(state: state).string(-1) else { return nil }
        return VisibleText.of(text)
    }

    // MARK: Text (table, csv, lua)

    private func text(_ lua: LuaInspection, _ index: Int32) -> String {
        switch lua.type(index) {
        case LUA_TSTRING:
            // A returned string keeps its lines; its control characters
            // must not drive the terminal.
            return VisibleText.of(lua.string(index) ?? "", keepingNewlines: true)
        case LUA_TTABLE:
            let name = lua.metatableName(index)
            if name == "opsh.NULL" { return unicode ? "∅" : "NULL" }
            if mode == .csv || mode == .tsv, name == "opsh.rows", let columns = lua.metatableColumns(index) {
                // Every row, straight from the rows' bytes (a file or a pipe).
                let text = delimited(lua).render(lua.state, index, columns: columns)
                if PrintCancellation.isRequested { return "(printing stopped by Ctrl-C)" }
                return text
            }
            if mode != .lua, name == "opsh.rows" || name == "opsh.row", let columns = lua.metatableColumns(index) {
                let total = name == "opsh.rows" ? Int(lua_rawlen(lua.state, index)) : 1
                let limit = mode == .csv || mode == .tsv ? nil : maximumRows
                let width = currentWidth
                let cap = valueCap(width: width)
                let dates = dateColumns(lua, index)
                let cells = name == "opsh.rows" ? rowSetCells(lua, index, columns: columns, dates: dates, limit: limit, cap: cap)
                    : [columns.map { cell(lua, row: lua_absindex(lua.state, index), column: $0, isDate: dates.contains($0), cap: cap) }]
                if PrintCancellation.isRequested {
                    return "(printing stopped by Ctrl-C after reading \(cells.count) of \(total) rows)"
                }
                switch mode {
                case .csv, .tsv: return delimited(lua).render(columns: columns, cells: cells)
                case .line: return records(columns: columns, rows: cells, total: total, width: width)
                default:
                    // A row that cannot fit the terminal even with its
                    // columns cut: one record at a time (psql's \x auto).
                    let formatter = TableFormatter(maximumColumnWidth: maximumColumnWidth, unicode: unicode, totalWidth: width)
                    if columns.count > 1, !formatter.fits(columns: columns, rows: cells) {
                        return records(columns: columns, rows: cells, total: total, width: width)
                    }
                    return table(columns: columns, rows: cells, total: total, width: width)
                }
            }
            if mode != .lua, name == "opsh.rows", lua_rawlen(lua.state, index) == 0 {
                // No columns known: the count alone, as for any empty result.
                return TableFormatter.countLine(shown: 0, total: 0)
            }
            var path: Set<UnsafeRawPointer> = []
            return literal(lua, index, depth: 0, indent: "", path: &path)
        default:
            return lua.plainText(index)
        }
    }

    /// CSV or TSV of row sets, other cells as ``cell(_:row:column:cap:)``
    /// shows them (secrets masked).
    private func delimited(_ lua: LuaInspection) -> DelimitedText {
        DelimitedText(format: mode == .tsv ? .tsv : .csv) { row, column in cell(lua, row: row, column: column, isDate: false, cap: .max) }
    }

    private func records(columns: [String], rows: [[TableFormatter.Cell]], total: Int, width: Int?) -> String {
        RecordFormatter(nullMarker: unicode ? "∅" : "NULL", totalWidth: width).format(columns: columns, rows: rows, total: total)
    }

    /// The cells of the rows of a row set (the first `limit`), in column
    /// order; stops early on Ctrl-C.
    private func rowSetCells(_ lua: LuaInspection, _ index: Int32, columns: [String], dates: Set<String>, limit: Int?,
                             cap: Int) -> [[TableFormatter.Cell]] {
        let rowsIndex = lua_absindex(lua.state, index)
        var rows: [[TableFormatter.Cell]] = []
        var position: lua_Integer = 1
        while rows.count < (limit ?? .max), !PrintCancellation.isRequested,
              lua_rawgeti(lua.state, rowsIndex, position) == LUA_TTABLE {
            let row = lua_gettop(lua.state)
            rows.append(columns.map { cell(lua, row: row, column: $0, isDate: dates.contains($0), cap: cap) })
            opsh_pop(lua.state, 1)
            position += 1
        }
        opsh_pop(lua.state, 1)
        return rows
    }

    private func table(columns: [String], rows: [[TableFormatter.Cell]], total: Int, width: Int?) -> String {
        guard !columns.isEmpty else { return TableFormatter.countLine(shown: rows.count, total: total) }
        return TableFormatter(maximumColumnWidth: maximumColumnWidth, unicode: unicode, totalWidth: width)
            .format(columns: columns, rows: rows, total: total)
    }

    /// Bytes of one string value read: only what can be shown (a column is
    /// at most as wide as the table, 4 bytes a character at most).
    private func valueCap(width: Int?) -> Int {
        switch mode {
        case .table: return (maximumColumnWidth ?? width ?? maximumValueBytes / 4) * 4 + 4
        case .line: return maximumValueBytes
        default: return Int.max
        }
    }

    private func cell(_ lua: LuaInspection, row: Int32, column: String, isDate: Bool, cap: Int) -> TableFormatter.Cell {
        LuaInspection.pushString(lua.state, column)
        lua_rawget(lua.state, row)
        defer { opsh_pop(lua.state, 1) }
        switch lua.type(-1) {
        case LUA_TNIL: return .null
        case LUA_TNUMBER:
            if isDate, showsDates, let date = Self.dateText(lua.number(-1)) { return .text(date) }
            return .number(lua.numberText(-1))
        case LUA_TSTRING:
            let (value, whole) = lua.string(-1, atMost: cap)
            let shown = SecretMask.isSecret(column) ? SecretMask.mask(value) : value
            return .text(whole ? shown : shown + "… (\(lua.length(-1)) bytes)")
        case LUA_TTABLE:
            if lua.metatableName(-1) == "opsh.NULL" { return .null }
            var path: Set<UnsafeRawPointer> = []
            return .text(literal(lua, -1, depth: maximumDepth - 1, indent: "", path: &path))
        default:
            return .text(lua.plainText(-1))
        }
    }

    /// Whether this mode shows dates (numbers stay numbers in CSV, TSV,
    /// JSON and Lua literals).
    private var showsDates: Bool { readableDates && (mode == .table || mode == .line) }

    /// The fields the metatable of the table at `index` declares as
    /// seconds since 1970: its `dates` set (rows: ``RowShapes``; a
    /// repository's plain tables, e.g. `config.get()`, `audit.list()`).
    private func dateColumns(_ lua: LuaInspection, _ index: Int32) -> Set<String> {
        let state = lua.state
        guard showsDates, lua_getmetatable(state, index) != 0 else { return [] }
        defer { opsh_pop(state, 1) }
        LuaInspection.pushString(state, "dates")
        defer { opsh_pop(state, 1) }
        guard lua_rawget(state, -2) == LUA_TTABLE else { return [] }
        var names: Set<String> = []
        lua_pushnil(state)
        while lua_next(state, -2) != 0 {
            if lua_type(state, -2) == LUA_TSTRING, lua_toboolean(state, -1) != 0, let name = lua.string(-2) {
                names.insert(name)
            }
            opsh_pop(state, 1)
        }
        return names
    }

    static func dateText(_ seconds: Double) -> String? {
        guard seconds.isFinite, seconds > 0, seconds < 32_503_680_000 else { return nil }
        var time = time_t(seconds.rounded(.down))
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return nil }
        return String(format: "%04d-%02d-%02d %02d:%02d:%02dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                      Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }

    // MARK: Lua literals

    private func literal(_ lua: LuaInspection, _ index: Int32, depth: Int, indent: String,
                         path: inout Set<UnsafeRawPointer>, secret: Bool = false) -> String {
        switch lua.type(index) {
        case LUA_TSTRING:
            let value = lua.string(index) ?? ""
            return Self.quote(secret ? SecretMask.mask(value) : value)
        case LUA_TTABLE:
            break
        default:
            return lua.plainText(index)
        }
        let name = lua.metatableName(index)
        if name == "opsh.NULL" { return "db.NULL" }
        guard let identity = lua.identity(index) else { return "{}" }
        if path.contains(identity) { return "<cycle>" }
        if depth >= maximumDepth { return "{…}" }
        guard lua_checkstack(lua.state, 6) != 0 else { return "{…}" }
        path.insert(identity)
        defer { path.remove(identity) }
        let table = lua_absindex(lua.state, index)

        let dates = mode == .lua ? [] : dateColumns(lua, table)
        var keys: [LuaInspection.Key]
        if name == "opsh.row", let columns = lua.metatableColumns(table) {
            keys = columns.map { .name($0) }
        } else {
            let listing = lua.keys(of: table)
            keys = (0..<listing.arrayCount).map { .position($0 + 1) } + listing.others
        }
        var entries: [String] = []
        for key in keys {
            if entries.count >= maximumItems {
                entries.append("… (\(keys.count - maximumItems) more)")
                break
            }
            guard lua.pushValue(of: table, key: key) else {
                if case let .other(text) = key { entries.append("[\(text)] = …") }
                continue
            }
            defer { opsh_pop(lua.state, 1) }
            if lua.type(-1) == LUA_TNIL { continue }
            let isSecret: Bool
            if case let .name(field) = key { isSecret = SecretMask.isSecret(field) } else { isSecret = false }
            var value = literal(lua, -1, depth: depth + 1, indent: indent + "  ", path: &path, secret: isSecret)
            if case let .name(field) = key, dates.contains(field), lua.type(-1) == LUA_TNUMBER,
               let date = Self.dateText(lua.number(-1)) {
                value = date
            }
            switch key {
            case .position: entries.append(value)
            case let .name(field):
                entries.append(Self.isIdentifier(field) ? "\(field) = \(value)" : "[\(Self.quote(field))] = \(value)")
            case let .number(number):
                let text = Int64(exactly: number).map(String.init) ?? String(number)
                entries.append("[\(text)] = \(value)")
            case .other: break
            }
        }
        if entries.isEmpty { return "{}" }
        let oneLine = "{ " + entries.joined(separator: ", ") + " }"
        if oneLine.count <= 80 && !oneLine.contains("\n") { return oneLine }
        let inner = indent + "  "
        return "{\n" + entries.map { inner + $0 }.joined(separator: ",\n") + "\n" + indent + "}"
    }

    static let keywords: Set<String> = [
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
        "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
    ]

    static func isIdentifier(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic) else {
            return false
        }
        return text.unicodeScalars.allSatisfy { $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) }
            && !keywords.contains(text)
    }

    static func quote(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F: result += "\\\(scalar.value)"
            // C1 controls, as Lua writes a code point.
            case _ where (0x80...0x9F).contains(scalar.value): result += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}

/// A value the printer cannot show in the chosen form.
public struct PrintError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}
