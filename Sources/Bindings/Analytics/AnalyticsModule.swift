import Foundation
import LuaRuntime
import Store

/// `analytics.*` (aggregations as row sets, printed as tables) and the
/// global `chart` and `sparkline`.
///
/// ```lua
/// analytics.models{ since = "7d" }                 -- per model: tokens, cost, latency
/// analytics.daily{ model = "llama-3-8b", since = "2024-05-01", ["until"] = "2024-06-01" }
/// analytics.usage{ since = "30d" }                 -- from model_usage_stats, with error rates
/// analytics.builds{ since = os.time() - 7 * 86400 } -- success rate and duration per scheme
/// print(chart(analytics.models{ since = "7d" }, "model", "tokens"))
/// print(chart(rows, "day", "cost", { width = 30 }))
/// print(sparkline(analytics.daily{ since = "14d" }, "tokens"), sparkline{ 1, 5, 3 })
/// ```
///
/// `since` and `until` take a date (seconds since 1970), a UTC day
/// (`"2024-05-01"`) or a duration back from now (`"7d"`).
enum AnalyticsModule {
    static func install(in session: OpshSession) {
        let database = session.database
        install(runtime: session.runtime, rowShapes: session.rowShapes) { body in
            try database.read(table: "analytics") { db in try body(db) }
        }
    }

    /// Installs `analytics`, `chart` and `sparkline`; `read` runs an
    /// aggregation on the session's engine.
    static func install(runtime: LuaRuntime, rowShapes: RowShapes,
                        read: @escaping ((any RepositoryConnection) throws -> Analytics.Report) throws -> Analytics.Report) {
        func push(_ report: Analytics.Report, _ call: LuaCall) -> Int32 {
            StoreValuePusher(rowShapes: rowShapes, state: call.state)
                .push(.array(report.rows), asRows: true, columns: report.columns)
            return 1
        }
        runtime.register(module: "analytics", [
            "models": { call in
                let options = try Options(call, allowed: ["since", "until"])
                return push(try read { db in try Analytics.models(db, period: options.period) }, call)
            },
            "daily": { call in
                let options = try Options(call, allowed: ["model", "since", "until"])
                return push(try read { db in try Analytics.daily(db, model: options.model, period: options.period) }, call)
            },
            "usage": { call in
                let options = try Options(call, allowed: ["model", "since", "until"])
                return push(try read { db in try Analytics.usage(db, model: options.model, period: options.period) }, call)
            },
            "builds": { call in
                let options = try Options(call, allowed: ["since", "until"])
                return push(try read { db in try Analytics.builds(db, period: options.period) }, call)
            },
        ])
        runtime.register("chart") { call in try chart(call) }
        runtime.register("sparkline") { call in try sparkline(call) }
    }

    /// The options table of an aggregation.
    struct Options {
        var period = Analytics.Period()
        var model: String?

        init(_ call: LuaCall, allowed: [String], now: Date = Date()) throws {
            let fields = call.isNoneOrNil(1) ? [:] : try call.table(1)
            for name in fields.keys.sorted() where !allowed.contains(name) {
                throw call.argumentError(1, "unknown option '\(name)' (options: \(allowed.joined(separator: ", ")))")
            }
            if let value = fields["model"], value != .nil {
                guard let text = value.stringValue else { throw call.argumentError(1, "model: a string expected, got \(value.typeName)") }
                model = text
            }
            period.since = try Self.date(fields["since"] ?? .nil, name: "since", call: call, now: now)
            period.until = try Self.date(fields["until"] ?? .nil, name: "until", call: call, now: now)
        }

        /// Seconds since 1970 from a number, a `YYYY-MM-DD` day (UTC) or a
        /// duration back from `now`.
        static func date(_ value: LuaValue, name: String, call: LuaCall, now: Date) throws -> Double? {
            switch value {
            case .nil: return nil
            case let .integer(seconds): return Double(seconds)
            case let .number(seconds) where seconds.isFinite: return seconds
            default:
                guard let text = value.stringValue else {
                    throw call.argumentError(1, "\(name): a date (seconds since 1970, \"2024-05-01\") or a duration (\"7d\") expected, got \(value.typeName)")
                }
                if let day = utcDay(text) { return day }
                guard let seconds = try? DurationText.seconds(text) else {
                    throw call.argumentError(1, "\(name): '\(text)' is neither a day (\"2024-05-01\") nor a duration (\"7d\", \"12h\")")
                }
                return now.timeIntervalSince1970 - seconds
            }
        }

        /// Midnight UTC of `YYYY-MM-DD`, nil if `text` is not such a day.
        static func utcDay(_ text: String) -> Double? {
            let parts = text.split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
                  let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]),
                  (1...12).contains(month), (1...31).contains(day) else { return nil }
            // Howard Hinnant's days_from_civil.
            let y = month <= 2 ? year - 1 : year
            let era = (y >= 0 ? y : y - 399) / 400
            let yoe = y - era * 400
            let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
            let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
            return Double(era * 146097 + doe - 719468) * 86400
        }
    }

    // MARK: chart and sparkline

    /// `chart(rows, labelColumn, valueColumn [, {width = 40}])` → string.
    static func chart(_ call: LuaCall) throws -> Int32 {
        let rows = try rowList(call, 1)
        let labelColumn = try call.string(2)
        let valueColumn = try call.string(3)
        var width = 40
        if !call.isNoneOrNil(4) {
            let options = try call.table(4)
            for name in options.keys.sorted() where name != "width" {
                throw call.argumentError(4, "unknown option '\(name)' (options: width)")
            }
            switch options["width"] ?? .nil {
            case .nil: break
            case let .integer(value) where (1...1000).contains(value): width = Int(value)
            case let value: throw call.argumentError(4, "width: a whole number from 1 to 1000 expected, got \(describe(value))")
            }
        }
        for column in [labelColumn, valueColumn] where !rows.isEmpty && rows.allSatisfy({ ($0[.string(column)] ?? .nil) == .nil }) {
            throw call.argumentError(column == labelColumn ? 2 : 3, "no column '\(column)' in the rows")
        }
        var items: [(label: String, value: Double?)] = []
        for (offset, row) in rows.enumerated() {
            let label: String
            switch row[.string(labelColumn)] ?? .nil {
            case .nil: label = ""
            case let .integer(value): label = String(value)
            case let .number(value): label = BarChart.format(value)
            case let value: label = value.stringValue ?? value.typeName
            }
            guard let value = number(row[.string(valueColumn)] ?? .nil) else {
                throw call.argumentError(3, "'\(valueColumn)' of row \(offset + 1) is a \((row[.string(valueColumn)] ?? .nil).typeName), not a number")
            }
            items.append((label, value))
        }
        return call.results(.string(BarChart.bars(items, width: width)))
    }

    /// `sparkline(numbers)` or `sparkline(rows, column)` → string.
    static func sparkline(_ call: LuaCall) throws -> Int32 {
        var values: [Double?] = []
        if call.isNoneOrNil(2) {
            guard call.type(1) == .table else { throw call.typeError(1, expected: "table") }
            let list: [LuaValue]
            switch try call.value(1) {
            case let .array(elements): list = elements
            case let .table(fields) where fields.isEmpty: list = []
            default: throw call.argumentError(1, "an array of numbers expected")
            }
            for (offset, element) in list.enumerated() {
                guard let value = number(element) else {
                    throw call.argumentError(1, "element \(offset + 1) is a \(element.typeName), not a number")
                }
                values.append(value)
            }
        } else {
            let rows = try rowList(call, 1)
            let column = try call.string(2)
            for (offset, row) in rows.enumerated() {
                guard let value = number(row[.string(column)] ?? .nil) else {
                    throw call.argumentError(2, "'\(column)' of row \(offset + 1) is a \((row[.string(column)] ?? .nil).typeName), not a number")
                }
                values.append(value)
            }
        }
        return call.results(.string(BarChart.sparkline(values)))
    }

    /// `.some(number)` for a number, `.some(nil)` for nil (a NULL column),
    /// nil for anything else (not a number).
    private static func number(_ value: LuaValue) -> Double?? {
        switch value {
        case .nil: return .some(nil)
        case let .integer(number): return .some(Double(number))
        case let .number(number): return .some(number)
        default: return nil
        }
    }

    /// The rows of argument `index`: an array of tables (an empty table is
    /// no rows).
    private static func rowList(_ call: LuaCall, _ index: Int32) throws -> [[LuaValue: LuaValue]] {
        guard call.type(index) == .table else { throw call.typeError(index, expected: "table of rows") }
        switch try call.value(index) {
        case let .table(fields) where fields.isEmpty: return []
        case let .array(elements):
            return try elements.enumerated().map { offset, element in
                guard case let .table(fields) = element else {
                    throw call.argumentError(index, "row \(offset + 1) is a \(element.typeName), not a table of columns")
                }
                return fields
            }
        default:
            throw call.argumentError(index, "an array of rows expected")
        }
    }

    private static func describe(_ value: LuaValue) -> String {
        switch value {
        case let .integer(number): return String(number)
        case let .number(number): return BarChart.format(number)
        case let .string(text): return "'\(text)'"
        default: return value.typeName
        }
    }
}
