import CLuaShim
import Foundation
import LuaRuntime
import Store

/// `db.copy(table, rows | file, { format = "csv", header = true, columns = {…} })`:
/// rows into one table in one write, all or none, by the engine's bulk
/// path (``DatabaseSession/copy(_:)``: COPY FROM STDIN on PostgreSQL,
/// prepared INSERTs in one transaction on SQLite). Returns the rows written.
///
/// ```lua
/// db.copy("events", { {1, "start"}, {2, "stop"} }, { columns = {"id", "name"} })
/// db.copy("events", { {id = 1, name = "start"} })          -- columns: the first row's keys
/// db.copy("events", "/tmp/events.csv", { header = true })  -- every column, in the table's order
/// ```
///
/// A row with too many values, a line of the file with too few or too
/// many fields, or a value the column does not take, fails the whole copy
/// naming the row (the Lua table's index) or the line of the file, and
/// the column. A Lua row shorter than the columns ends in NULLs (a Lua
/// list ends at its last value that is not nil).
enum CopyFunction {
    static func install(in session: OpshSession) {
        let database = session.database
        let markers = session.markers
        let sandbox = session.options.sandbox
        session.runtime.register(module: "db", [
            "copy": { call in
                let (request, clearProgress) = try request(call, markers: markers, dialect: database.dialect, sandbox: sandbox)
                    .showingProgress()
                defer { clearProgress() }
                do {
                    return call.results(.integer(Int64(try database.copy(request))))
                } catch let failure as CopyFailure {
                    throw LuaCallError.message("db.copy into \(request.table): \(failure); nothing was copied")
                }
            },
        ])
    }

    static func request(_ call: LuaCall, markers: SQLMarkers, dialect: SQLDialect, sandbox: Bool) throws -> CopyRequest {
        let table = try call.string(1)
        var header = false
        var columns: [String] = []
        if !call.isNoneOrNil(3) {
            let options = try call.table(3)
            for name in options.keys.sorted() where !["format", "header", "columns"].contains(name) {
                throw call.argumentError(3, "unknown option '\(name)' (options: format, header, columns)")
            }
            switch options["format"] {
            case nil, .string("csv")?: break
            case let .string(other)?: throw call.argumentError(3, "format: only \"csv\" is read, got \"\(other)\"")
            case let value?: throw call.argumentError(3, "format: \"csv\" expected, got \(value.typeName)")
            }
            switch options["header"] {
            case nil: break
            case let .boolean(flag)?: header = flag
            case let value?: throw call.argumentError(3, "header: true or false expected, got \(value.typeName)")
            }
            switch options["columns"] {
            case nil: break
            case let .array(names)?:
                columns = try names.enumerated().map { index, name in
                    guard case let .string(text) = name else {
                        throw call.argumentError(3, "columns[\(index + 1)]: a column name expected, got \(name.typeName)")
                    }
                    return text
                }
            case let value?: throw call.argumentError(3, "columns: a list of column names expected, got \(value.typeName)")
            }
        }
        let source: CopyRequest.Source
        switch call.type(2) {
        case .string:
            if sandbox { throw call.argumentError(2, "a file: no files in the sandbox (pass the rows as a table)") }
            source = .csv(path: (try call.string(2) as NSString).expandingTildeInPath, header: header)
        case .table:
            if header { throw call.argumentError(3, "header: only a file has a header line") }
            let rows = try readRows(call, columns: &columns, markers: markers, dialect: dialect)
            source = .rows(rows)
        default:
            throw call.typeError(2, expected: "table of rows or a file's path")
        }
        do {
            var request = try CopyRequest(table: table, columns: columns, source: source)
            request.namedByScript = true
            return request
        } catch let failure as CopyFailure {
            throw call.argumentError(failure.description.contains("column") ? 3 : 1, failure.description)
        }
    }

    /// Each row: a list of values in `columns`' order, or a table keyed by
    /// column name (then `columns`, when not given, are the first row's
    /// keys in sorted order, and a key outside them is refused).
    private static func readRows(_ call: LuaCall, columns: inout [String], markers: SQLMarkers,
                                 dialect: SQLDialect) throws -> [[StoreValue]] {
        let state = call.state
        let count = Int(lua_rawlen(state, 2))
        var rows: [[StoreValue]] = []
        rows.reserveCapacity(count)
        _ = lua_checkstack(state, 8)
        for index in 1...max(count, 1) where count > 0 {
            lua_rawgeti(state, 2, lua_Integer(index))
            defer { opsh_pop(state, 1) }
            let row = lua_gettop(state)
            guard lua_type(state, row) == LUA_TTABLE, !markers.isBlob(state, row), !markers.isNull(state, row) else {
                throw call.argumentError(2, "row \(index): a table of values expected, got \(call.stack.typeName(at: row))")
            }
            let length = Int(lua_rawlen(state, row))
            if length > 0 || columns.isEmpty && isEmpty(state, row) {
                // Without columns, the first row's length is every row's.
                let width = columns.isEmpty ? (rows.first?.count ?? length) : columns.count
                // A Lua list ends at its last value that is not nil: a
                // shorter row has NULLs at the end. A longer one is wrong.
                guard length <= width else {
                    let names = columns.isEmpty ? "" : " (\(columns.joined(separator: ", ")))"
                    throw call.argumentError(2, "row \(index): \(length) values for \(width) columns\(names)")
                }
                var values: [StoreValue] = []
                values.reserveCapacity(width)
                for position in 0..<width {
                    lua_rawgeti(state, row, lua_Integer(position + 1))
                    defer { opsh_pop(state, 1) }
                    let label = "row \(index), " + (position < columns.count ? "column \(columns[position])" : "value \(position + 1)")
                    values.append(try SQLValueReader.value(call, lua_gettop(state), argument: 2, label: label,
                                                           markers: markers, dialect: dialect))
                }
                rows.append(values)
                continue
            }
            // Keyed by column name.
            var keyed: [String: Int32] = [:]
            lua_pushnil(state)
            while lua_next(state, row) != 0 {
                guard lua_type(state, -2) == LUA_TSTRING, let key = call.stack.string(at: -2) else {
                    opsh_pop(state, 2)
                    throw call.argumentError(2, "row \(index): mixes values by position and by column name")
                }
                opsh_pop(state, 1)
                keyed[key] = 0
            }
            if columns.isEmpty { columns = keyed.keys.sorted() }
            if let unknown = keyed.keys.sorted().first(where: { !columns.contains($0) }) {
                throw call.argumentError(2, "row \(index): '\(unknown)' is not among the columns (\(columns.joined(separator: ", ")))")
            }
            var values: [StoreValue] = []
            values.reserveCapacity(columns.count)
            for column in columns {
                lua_getfield(state, row, column)
                defer { opsh_pop(state, 1) }
                values.append(try SQLValueReader.value(call, lua_gettop(state), argument: 2, label: "row \(index), column \(column)",
                                                       markers: markers, dialect: dialect))
            }
            rows.append(values)
        }
        return rows
    }

    private static func isEmpty(_ state: OpaquePointer, _ index: Int32) -> Bool {
        lua_pushnil(state)
        guard lua_next(state, index) != 0 else { return true }
        opsh_pop(state, 2)
        return false
    }
}
