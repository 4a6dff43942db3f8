import CLuaShim
import CSQLBridge
import Foundation
import GRDB
import GRDBSQLite
import LuaRuntime

/// Reads a call's SQL arguments as GRDB `StatementArguments`, for the
/// paths that go through GRDB (the dry run's writes, repositories). Same
/// rules as ``StatementBridge``.
enum StatementArgumentsReader {
    static func arguments(for statement: OpaquePointer, call: LuaCall, from first: Int32,
                          markers: SQLMarkers) throws -> StatementArguments {
        let state = call.state
        let given = max(0, call.argumentCount - first + 1)
        if given == 1, lua_type(state, first) == LUA_TTABLE, !markers.isMarker(state, first) {
            var named: [String: DatabaseValue] = [:]
            var positional: [DatabaseValue] = []
            let count = sqlite3_bind_parameter_count(statement)
            for position in 1...max(1, count) where count > 0 {
                if let rawName = sqlite3_bind_parameter_name(statement, position) {
                    let name = String(cString: rawName + 1)
                    lua_pushstring(state, name)
                    lua_rawget(state, first)
                    defer { lua_settop(state, -2) }
                    if lua_type(state, -1) == LUA_TNIL {
                        throw LuaCallError.message("no value for parameter \(String(cString: rawName)) in the table of parameters")
                    }
                    named[name] = try databaseValue(state, lua_gettop(state), call: call, argument: first, markers: markers)
                } else {
                    let type = lua_rawgeti(state, first, lua_Integer(position))
                    defer { lua_settop(state, -2) }
                    if type == LUA_TNIL {
                        throw LuaCallError.message("no value for parameter \(position) in the table of parameters (write NULL as db.NULL)")
                    }
                    positional.append(try databaseValue(state, lua_gettop(state), call: call, argument: first, markers: markers))
                }
            }
            return named.isEmpty ? StatementArguments(positional) : StatementArguments(named)
        }
        var values: [DatabaseValue] = []
        if given > 0 {
            for index in first...(first + given - 1) {
                values.append(try databaseValue(state, index, call: call, argument: index, markers: markers))
            }
        }
        return StatementArguments(values)
    }

    /// ``SQLValueReader``'s value as GRDB binds it.
    static func databaseValue(_ state: OpaquePointer, _ index: Int32, call: LuaCall, argument: Int32,
                              markers: SQLMarkers) throws -> DatabaseValue {
        switch try SQLValueReader.value(call, index, argument: argument, markers: markers) {
        case .integer(let number): return number.databaseValue
        case .real(let number): return number.databaseValue
        case .text(let text): return text.databaseValue
        case .blob(let bytes): return Data(bytes).databaseValue
        case .null, .array, .object: return .null
        }
    }
}
