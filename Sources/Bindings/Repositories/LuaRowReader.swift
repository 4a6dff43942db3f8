import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store

func quoted(_ identifier: String) -> String {
    guard identifier.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + identifier + "\"" }
    return "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// Reads Lua arguments (row tables, keys, list options) into database
/// values, checking them the way Lua's library checks arguments. Text is
/// read whole, a NUL byte included (SQLite keeps it); what the engine
/// cannot hold is refused naming the key, field or filter
/// (``SQLDialect/refusal(ofText:)``), and so are strings that are not
/// UTF-8 and NaN.
struct LuaRowReader {
    let call: LuaCall
    let markers: SQLMarkers
    /// The engine's: what text it holds.
    let dialect: SQLDialect

    var state: OpaquePointer { call.state }

    /// The string keys of the table at `index`, sorted, so that the first
    /// error reported does not depend on the table's hash order.
    func fieldNames(at index: Int32, argument: Int32) throws -> [String] {
        var names: [String] = []
        _ = lua_checkstack(state, 4)
        lua_pushnil(state)
        while lua_next(state, index) != 0 {
            guard lua_type(state, -2) == LUA_TSTRING, let name = LuaStack(state).string(at: -2) else {
                let type = LuaStack(state).typeName(at: -2)
                opsh_pop(state, 2)
                throw call.argumentError(argument, "field names must be strings, got a \(type) key")
            }
            names.append(name)
            opsh_pop(state, 1)
        }
        return names.sorted()
    }

    /// Pushes field `name` of the table at `index` (raw).
    func pushField(_ name: String, of index: Int32) {
        LuaStack(state).push(name)
        lua_rawget(state, index)
    }

    /// The fields of the row table at argument `argument`, converted for
    /// the columns of `spec`; unknown names are refused.
    func fields(argument: Int32, spec: TableSpec, skipping: Set<String> = []) throws -> [String: StoreValue] {
        guard lua_type(state, argument) == LUA_TTABLE, !markers.isNull(state, argument) else {
            throw call.typeError(argument, expected: "table")
        }
        return try fields(at: argument, argument: argument, spec: spec, skipping: skipping, prefix: "")
    }

    /// The fields of the table at stack `index` (an argument or a nested
    /// table); `prefix` names where it is in messages (`routing_policies[2].`).
    func fields(at index: Int32, argument: Int32, spec: TableSpec, skipping: Set<String> = [],
                prefix: String) throws -> [String: StoreValue] {
        let absolute = lua_absindex(state, index)
        // In the table's own order, each value read where `next` finds it;
        // a refusal is then looked for again in the names' order, so that
        // the first one reported does not depend on the table's hash order.
        let top = lua_gettop(state)
        do {
            return try unorderedFields(at: absolute, argument: argument, spec: spec, skipping: skipping, prefix: prefix)
        } catch {
            lua_settop(state, top)
        }
        return try orderedFields(at: absolute, argument: argument, spec: spec, skipping: skipping, prefix: prefix)
    }

    private func unorderedFields(at absolute: Int32, argument: Int32, spec: TableSpec, skipping: Set<String>,
                                 prefix: String) throws -> [String: StoreValue] {
        var result = [String: StoreValue](minimumCapacity: 8)
        _ = lua_checkstack(state, 4)
        lua_pushnil(state)
        while lua_next(state, absolute) != 0 {
            guard lua_type(state, -2) == LUA_TSTRING, let name = LuaStack(state).string(at: -2) else {
                throw call.argumentError(argument, "field names must be strings")
            }
            if !skipping.contains(name) {
                guard let column = spec.column(name) else {
                    throw StoreError.unknownColumn(table: spec.table, column: prefix + name, known: spec.names)
                }
                result[name] = try value(at: lua_gettop(state), column: column, spec: spec, argument: argument, prefix: prefix)
            }
            opsh_pop(state, 1)
        }
        return result
    }

    private func orderedFields(at absolute: Int32, argument: Int32, spec: TableSpec, skipping: Set<String>,
                               prefix: String) throws -> [String: StoreValue] {
        var result: [String: StoreValue] = [:]
        for name in try fieldNames(at: absolute, argument: argument) where !skipping.contains(name) {
            guard let column = spec.column(name) else {
                throw StoreError.unknownColumn(table: spec.table, column: prefix + name, known: spec.names)
            }
            pushField(name, of: absolute)
            defer { opsh_pop(state, 1) }
            result[name] = try value(at: lua_gettop(state), column: column, spec: spec, argument: argument, prefix: prefix)
        }
        return result
    }

    /// The fields of the row table at argument `argument` by column
    /// position (`names`: the columns' names in UTF-8), for a planned
    /// write (``RecordWritePlans``): no dictionary, no string per name.
    /// Nil when any field needs the general path (``fields(argument:spec:skipping:)``),
    /// which reads the table again and says what is wrong.
    func columnValues(argument: Int32, spec: TableSpec, names: [[UInt8]]) -> [StoreValue?]? {
        guard lua_type(state, argument) == LUA_TTABLE, !markers.isNull(state, argument), names.count == spec.columns.count else {
            return nil
        }
        let top = lua_gettop(state)
        var values = [StoreValue?](repeating: nil, count: names.count)
        _ = lua_checkstack(state, 4)
        lua_pushnil(state)
        while lua_next(state, argument) != 0 {
            // The type first: lua_tolstring would turn a number key into
            // a string and break the traversal.
            guard lua_type(state, -2) == LUA_TSTRING, let index = position(ofKeyAt: -2, in: names),
                  let value = try? value(at: lua_gettop(state), column: spec.columns[index], spec: spec, argument: argument) else {
                lua_settop(state, top)
                return nil
            }
            values[index] = value
            opsh_pop(state, 1)
        }
        return values
    }

    /// ``columnValues(argument:spec:names:)`` for a caller that binds the
    /// script's own values (SQLite's C write, issue 27): a string for a
    /// text column and an integer for an integer column, none of them a
    /// column the plan reads (`layout`'s ``RecordWritePlans/Layout/inspected``),
    /// are checked as ``value(at:column:spec:argument:prefix:)`` checks
    /// them but not made into ``StoreValue``s: each is copied to slot
    /// `top + 1 + i` of the stack (column `i`; `top` the stack's top
    /// before the call, nil in the other slots) and its bit set in
    /// `given`; `values` is empty when every field is given. Nil, the
    /// stack as it was, when any field needs the general path.
    func columnValues(argument: Int32, spec: TableSpec, layout: RecordWritePlans.Layout)
        -> (values: [StoreValue?], given: UInt64)? {
        let names = layout.utf8Names
        guard lua_type(state, argument) == LUA_TTABLE, !markers.isNull(state, argument), names.count == spec.columns.count,
              dialect.textKeepsAnyBytes else {
            return nil
        }
        let top = lua_gettop(state)
        guard lua_checkstack(state, Int32(names.count) + 4) != 0 else { return nil }
        lua_settop(state, top + Int32(names.count))
        // Made only when a field is not given: a row table of given
        // values (the loop's usual one) makes no array to fill and tear
        // down (``RecordWritePlans``: empty, every value nil).
        var values: [StoreValue?] = []
        var given: UInt64 = 0
        lua_pushnil(state)
        while lua_next(state, argument) != 0 {
            guard lua_type(state, -2) == LUA_TSTRING, let index = position(ofKeyAt: -2, in: names) else {
                lua_settop(state, top)
                return nil
            }
            if layout.inspected & (1 << index) == 0, Self.bindsAsGiven(state, -1, spec.columns[index].kind) {
                lua_copy(state, -1, top + 1 + Int32(index))
                given |= 1 << index
            } else {
                guard let value = try? value(at: lua_gettop(state), column: spec.columns[index], spec: spec, argument: argument) else {
                    lua_settop(state, top)
                    return nil
                }
                if values.isEmpty { values = [StoreValue?](repeating: nil, count: names.count) }
                values[index] = value
            }
            opsh_pop(state, 1)
        }
        return (values, given)
    }

    /// Whether the value at `index` is one ``value(at:column:spec:argument:prefix:)``
    /// takes for a column of `kind` as it is, and the C write binds as
    /// Lua holds it (`opsh_sql_bind_plain`) to the same value: a UTF-8
    /// string for text (SQLite keeps a NUL), an integer for an integer.
    private static func bindsAsGiven(_ state: OpaquePointer, _ index: Int32, _ kind: ColumnSpec.Kind) -> Bool {
        switch kind {
        case .text:
            guard lua_type(state, index) == LUA_TSTRING else { return false }
            var length = 0
            guard let bytes = lua_tolstring(state, index, &length) else { return false }
            return opsh_utf8_valid(bytes, length) != 0
        case .integer:
            return lua_type(state, index) == LUA_TNUMBER && lua_isinteger(state, index) != 0
        default:
            return false
        }
    }

    /// The position in `names` of the string at `index`, compared in bytes.
    private func position(ofKeyAt index: Int32, in names: [[UInt8]]) -> Int? {
        var length = 0
        guard let bytes = lua_tolstring(state, index, &length) else { return nil }
        for (position, name) in names.enumerated() where name.count == length {
            if name.withUnsafeBufferPointer({ $0.baseAddress.map { memcmp($0, bytes, length) == 0 } ?? true }) { return position }
        }
        return nil
    }

    /// One field's value for its column.
    func value(at index: Int32, column: ColumnSpec, spec: TableSpec, argument: Int32, prefix: String = "") throws -> StoreValue {
        // Named only when refused: made per value, the label showed in a
        // loop's profile.
        var field: String { "field '\(prefix)\(column.name)'" }
        func typeError() -> LuaCallError {
            call.argumentError(argument, "\(field): \(column.expected) expected, got \(LuaStack(state).typeName(at: index))")
        }
        if markers.isNull(state, index) {
            if column.notNull {
                throw call.argumentError(argument, "\(field): cannot be NULL (\(spec.table).\(column.name) is NOT NULL)")
            }
            return .null
        }
        let type = lua_type(state, index)
        switch column.kind {
        case .text:
            guard type == LUA_TSTRING else { throw typeError() }
            return .text(try text(at: index, argument: argument, naming: field))
        case .integer:
            guard type == LUA_TNUMBER else { throw typeError() }
            var isInteger: Int32 = 0
            let integer = opsh_tointeger(state, index, &isInteger)
            guard isInteger != 0 else {
                throw call.argumentError(argument, "\(field): number has no integer representation")
            }
            return .integer(integer)
        case .real:
            guard type == LUA_TNUMBER else { throw typeError() }
            let number = opsh_tonumber(state, index, nil)
            guard number.isFinite else {
                throw call.argumentError(argument, "\(field): a finite number expected, got \(number)")
            }
            return .real(number)
        case .boolean:
            if type == LUA_TBOOLEAN { return .integer(lua_toboolean(state, index) != 0 ? 1 : 0) }
            guard type == LUA_TNUMBER, lua_isinteger(state, index) != 0 else { throw typeError() }
            let integer = opsh_tointeger(state, index, nil)
            guard integer == 0 || integer == 1 else {
                throw call.argumentError(argument, "\(field): boolean expected, got number \(integer)")
            }
            return .integer(integer)
        case .json:
            let text: String
            if type == LUA_TSTRING {
                text = try self.text(at: index, argument: argument, naming: field)
            } else {
                guard type == LUA_TTABLE, !markers.isBlob(state, index) else { throw typeError() }
                var writer = LuaJSONWriter(state: state, markers: markers, emptyTableIsObject: column.defaultSQL == "'{}'")
                do {
                    text = try writer.encode(at: index)
                } catch let failure as LuaJSONWriter.Failure {
                    throw StoreError.invalidValue(table: spec.table, column: column.name, reason: failure.message)
                }
            }
            // A column whose default is a list (`platforms`) takes a list:
            // a table with named fields, or JSON text of an object, is
            // refused (text that is not JSON is refused as such later).
            if column.defaultSQL == "'[]'", case let shape = text.first(where: { !$0.isWhitespace }),
               type == LUA_TTABLE ? shape != "[" : shape == "{" {
                throw call.argumentError(argument, "\(field): a list expected (e.g. { \"linux\" }), got \(type == LUA_TSTRING ? "the text '\(text.prefix(40))'" : "a table with named fields")")
            }
            return .text(text)
        }
    }

    /// A primary-key argument: the key as given, every byte of it, or
    /// refused (it would otherwise reach another row: `com.ex.app\0x` was
    /// `com.ex.app` to SQLite through GRDB).
    func key(argument: Int32, spec: TableSpec) throws -> StoreValue {
        let column = spec.columns.first(where: \.isPrimaryKey)
        if column?.kind == .integer {
            return .integer(try call.integer(argument))
        }
        let type = lua_type(state, argument)
        guard type == LUA_TSTRING || type == LUA_TNUMBER else {
            throw call.typeError(argument, expected: "string")
        }
        // A string read as ``LuaCall/string(_:)`` reads it, without the
        // call's own checks again (a share of a repository call, issue 27).
        let key = type == LUA_TSTRING
            ? try call.stack.text(at: argument) { throw call.argumentError(argument, "string is not valid UTF-8 (\($0))") }
            : try call.string(argument)
        if let reason = dialect.refusal(ofText: key) { throw call.argumentError(argument, "key \(reason)") }
        return .text(key)
    }

    /// The string at `index` as text the engine holds: UTF-8, and without
    /// NUL where the engine cannot hold one; else refused naming `what`.
    func text(at index: Int32, argument: Int32, naming what: @autoclosure () -> String) throws -> String {
        let text = try LuaStack(state).text(at: index) { throw call.argumentError(argument, "\(what()): the string is not valid UTF-8 (\($0))") }
        if let reason = dialect.refusal(ofText: text) { throw call.argumentError(argument, "\(what()): \(reason)") }
        return text
    }

    /// A plain value for a filter on a column of `kind` (when known): a
    /// number column takes a number, or a duration (`"1d"`, `"30m"`) meaning
    /// that long ago, as `telemetry.cleanup{ olderThan = }` does; any other
    /// string there would silently match nothing, so it is refused.
    func filterValue(at index: Int32, path: String, argument: Int32, kind: ColumnSpec.Kind? = nil) throws -> StoreValue {
        if markers.isNull(state, index) { return .null }
        switch lua_type(state, index) {
        case LUA_TSTRING:
            let text = try self.text(at: index, argument: argument, naming: path)
            if kind == .real || kind == .integer {
                guard let seconds = try? DurationText.seconds(text) else {
                    throw call.argumentError(argument, "\(path): a number expected (dates are seconds since 1970; a duration such as \"1d\" or \"30m\" means that long ago), got '\(text)'")
                }
                let ago = Date().timeIntervalSince1970 - seconds
                return kind == .integer ? .integer(Int64(ago)) : .real(ago)
            }
            return .text(text)
        case LUA_TNUMBER:
            if lua_isinteger(state, index) != 0 {
                let number = opsh_tointeger(state, index, nil)
                // A text column compares with text: SQLite's column affinity
                // turns 5 into '5' itself; PostgreSQL has no text = bigint.
                return kind == .text ? .text(String(number)) : .integer(number)
            }
            let number = opsh_tonumber(state, index, nil)
            if number.isNaN {
                // SQLite binds NaN as NULL (it matched nothing), PostgreSQL as NaN (it matched NaN rows).
                throw call.argumentError(argument, "\(path): NaN (not a number) is not a value SQL compares or stores alike on every engine (SQLite takes it for NULL): write a number, or db.NULL")
            }
            return .real(number)
        case LUA_TBOOLEAN:
            let flag: Int64 = lua_toboolean(state, index) != 0 ? 1 : 0
            return kind == .text ? .text(String(flag)) : .integer(flag)
        default:
            throw call.argumentError(argument, "\(path): a string, number, boolean or db.NULL expected, got \(LuaStack(state).typeName(at: index))")
        }
    }

    static let listOptions = ["where", "order", "limit", "offset"]
    static let operators: [(String, ColumnFilter.Operator)] = [
        ("eq", .equal), ("ne", .notEqual), ("lt", .less), ("le", .lessOrEqual),
        ("gt", .greater), ("ge", .greaterOrEqual), ("like", .like),
    ]

    /// `{ where = {…}, order = "createdAt desc", limit = 10, offset = 0 }`.
    /// - parameter spec: the table's columns: filters on unknown columns are
    ///   refused, and a filter on a number column (dates are numbers) takes
    ///   a number or a duration meaning that long ago (`"1d"`), nothing else.
    func listRequest(argument: Int32, allowed: [String] = listOptions, spec: TableSpec? = nil) throws -> ListRequest {
        var request = ListRequest()
        if call.isNoneOrNil(argument) { return request }
        guard lua_type(state, argument) == LUA_TTABLE else { throw call.typeError(argument, expected: "table") }
        for name in try fieldNames(at: argument, argument: argument) {
            guard allowed.contains(name) else {
                throw call.argumentError(argument, "unknown option '\(name)' (options: \(allowed.joined(separator: ", ")))")
            }
            pushField(name, of: argument)
            defer { opsh_pop(state, 1) }
            let top = lua_gettop(state)
            switch name {
            case "where": request.filters = try filters(at: top, argument: argument, spec: spec)
            case "order": request.order = try order(at: top, argument: argument)
            case "limit", "offset":
                guard lua_type(state, top) == LUA_TNUMBER else {
                    throw call.argumentError(argument, "\(name): number expected, got \(LuaStack(state).typeName(at: top))")
                }
                var isInteger: Int32 = 0
                let value = opsh_tointeger(state, top, &isInteger)
                guard isInteger != 0, value >= 0, value <= Int64(Int32.max) else {
                    let shown = isInteger != 0 ? String(value) : String(opsh_tonumber(state, top, nil))
                    throw call.argumentError(argument, "\(name): a whole number of 0 or more expected, got \(shown)")
                }
                if name == "limit" { request.limit = Int(value) } else { request.offset = Int(value) }
            default: break
            }
        }
        return request
    }

    private func filters(at index: Int32, argument: Int32, spec: TableSpec?) throws -> [ColumnFilter] {
        guard lua_type(state, index) == LUA_TTABLE, !markers.isNull(state, index) else {
            throw call.argumentError(argument, "where: table expected, got \(LuaStack(state).typeName(at: index))")
        }
        var filters: [ColumnFilter] = []
        for column in try fieldNames(at: index, argument: argument) {
            pushField(column, of: index)
            defer { opsh_pop(state, 1) }
            let top = lua_gettop(state)
            let path = "where.\(column)"
            let kind = spec?.column(column)?.kind
            func filterValue(at index: Int32, path: String, argument: Int32) throws -> StoreValue {
                try self.filterValue(at: index, path: path, argument: argument, kind: kind)
            }
            guard lua_type(state, top) == LUA_TTABLE, !markers.isNull(state, top) else {
                let value = try filterValue(at: top, path: path, argument: argument)
                filters.append(ColumnFilter(column, value == .null ? .isNull : .equal, storeValues: value == .null ? [] : [value]))
                continue
            }
            let length = lua_rawlen(state, top)
            if length > 0 {
                // An array: IN.
                var values: [StoreValue] = []
                for position in 1...Int64(length) {
                    lua_rawgeti(state, top, position)
                    defer { opsh_pop(state, 1) }
                    values.append(try filterValue(at: lua_gettop(state), path: "\(path)[\(position)]", argument: argument))
                }
                filters.append(ColumnFilter(column, .in, storeValues: values))
                continue
            }
            let names = try fieldNames(at: top, argument: argument)
            if names.isEmpty {
                throw call.argumentError(argument, "\(path): empty table (write an array of values for IN, or operators: eq, ne, lt, le, gt, ge, like)")
            }
            for name in names {
                guard let op = Self.operators.first(where: { $0.0 == name })?.1 else {
                    throw call.argumentError(argument, "\(path): unknown operator '\(name)' (operators: eq, ne, lt, le, gt, ge, like; an array means IN)")
                }
                pushField(name, of: top)
                defer { opsh_pop(state, 1) }
                let value = try filterValue(at: lua_gettop(state), path: "\(path).\(name)", argument: argument)
                if value == .null, op == .equal || op == .notEqual {
                    filters.append(ColumnFilter(column, op == .equal ? .isNull : .isNotNull, storeValues: []))
                } else if value == .null {
                    throw call.argumentError(argument, "\(path).\(name): NULL cannot be compared with \(name) (use eq or ne)")
                } else {
                    filters.append(ColumnFilter(column, op, storeValues: [value]))
                }
            }
        }
        return filters
    }

    private func order(at index: Int32, argument: Int32) throws -> [ColumnOrder] {
        var terms: [String] = []
        if lua_type(state, index) == LUA_TSTRING {
            terms = (LuaStack(state).string(at: index) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        } else if lua_type(state, index) == LUA_TTABLE {
            let length = lua_rawlen(state, index)
            for position in 0..<Int64(length) {
                lua_rawgeti(state, index, position + 1)
                defer { opsh_pop(state, 1) }
                guard lua_type(state, -1) == LUA_TSTRING, let term = LuaStack(state).string(at: -1) else {
                    throw call.argumentError(argument, "order[\(position + 1)]: string expected, got \(LuaStack(state).typeName(at: -1))")
                }
                terms.append(term)
            }
        } else {
            throw call.argumentError(argument, "order: string or array of strings expected, got \(LuaStack(state).typeName(at: index))")
        }
        return try terms.map { term in
            guard let order = ColumnOrder(parsing: term) else {
                throw call.argumentError(argument, "order: expected \"column\", \"column desc\" or \"-column\", got '\(term)'")
            }
            return order
        }
    }

    /// `{ cascade = true }` and the like: the named booleans allowed.
    func flags(argument: Int32, allowed: [String]) throws -> [String: Bool] {
        if call.isNoneOrNil(argument) { return [:] }
        guard lua_type(state, argument) == LUA_TTABLE else { throw call.typeError(argument, expected: "table") }
        var set: [String: Bool] = [:]
        for name in try fieldNames(at: argument, argument: argument) {
            guard allowed.contains(name) else {
                let known = allowed.isEmpty ? "none" : allowed.joined(separator: ", ")
                throw call.argumentError(argument, "unknown option '\(name)' (options: \(known))")
            }
            pushField(name, of: argument)
            defer { opsh_pop(state, 1) }
            guard lua_type(state, -1) == LUA_TBOOLEAN else {
                throw call.argumentError(argument, "\(name): boolean expected, got \(LuaStack(state).typeName(at: -1))")
            }
            set[name] = lua_toboolean(state, -1) != 0
        }
        return set
    }
}
