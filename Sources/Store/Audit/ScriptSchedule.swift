import Foundation

/// A script's declared period (`-- @every 10m` in its header) and the
/// dead man's switch over the audit trail: which scripts did not run
/// successfully within their period plus a grace.
public enum ScriptSchedule {
    /// The period declared in the script's header: the comment lines (and
    /// blank lines, and a `#!` line) before its first statement; `s`,
    /// `m`, `h`, `d`. Nil without one; throws for a malformed one.
    public static func period(in code: String) throws -> Double? {
        for (number, rawLine) in code.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || (number == 0 && line.hasPrefix("#!")) { continue }
            guard line.hasPrefix("--") else { return nil }
            let words = line.dropFirst(2).split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard let first = words.first, first == "@every" else { continue }
            guard words.count == 2, let unit = words[1].last, "smhd".contains(unit),
                  let number = Double(words[1].dropLast()), number.isFinite, number > 0,
                  words[1].dropLast().allSatisfy({ $0.isNumber || $0 == "." })
            else {
                throw StoreError.refused(reason: "line \(number + 1): '\(line)' is not a period: write `-- @every 10m` (a number and s, m, h or d)")
            }
            return number * DurationText.units[unit]!
        }
        return nil
    }

    /// How late a run may be before it counts as missed: 10 % of the
    /// period, at least a minute (cron starts on the minute, and a run
    /// takes its own time).
    public static func defaultGrace(for period: Double) -> Double {
        max(period * 0.1, 60)
    }

    /// A script with a period whose last successful run is too old.
    public struct Overdue: Sendable, Equatable {
        public var script: String
        public var period: Double
        public var grace: Double
        /// The last successful (status 0, not a dry run) run's start; nil
        /// when it never succeeded.
        public var lastSuccess: Double?
        /// Since when the script is due: the last success (or its first
        /// recorded run) plus the period.
        public var dueSince: Double
    }

    /// The scripts whose period (from their latest recorded run) has
    /// passed, plus the grace, since their last successful run.
    /// - parameter grace: seconds; nil: ``defaultGrace(for:)``.
    public static func overdue(_ db: some RepositoryConnection, now: Double, grace: Double? = nil) throws -> [Overdue] {
        let result = try db.fetch("""
            SELECT script,
                   (SELECT period FROM opsh_audit latest WHERE latest.script = runs.script AND latest.mode = 'run'
                    ORDER BY startedAt DESC LIMIT 1) AS period,
                   max(CASE WHEN status = 0 AND dryRun = 0 THEN startedAt END) AS "lastSuccess",
                   min(startedAt) AS "firstRun"
            FROM opsh_audit runs
            WHERE mode = 'run' AND script IS NOT NULL AND script <> '-'
            GROUP BY script
            ORDER BY \(db.dialect.orderTerm("script", descending: false, isText: true))
            """, [])
        func number(_ value: StoreValue) -> Double? {
            switch value {
            case let .real(number): number
            case let .integer(number): Double(number)
            default: nil
            }
        }
        var late: [Overdue] = []
        for row in result.rows {
            guard let script = row[0].textValue, let period = number(row[1]) else { continue }
            let lastSuccess = number(row[2])
            let from = lastSuccess ?? number(row[3]) ?? now
            let allowed = grace ?? defaultGrace(for: period)
            if now > from + period + allowed {
                late.append(Overdue(script: script, period: period, grace: allowed, lastSuccess: lastSuccess,
                                    dueSince: from + period))
            }
        }
        return late
    }

    /// "10m", "1h 30m", "2d": a duration as people write it.
    public static func describe(seconds: Double) -> String {
        if seconds < 60 { return seconds == seconds.rounded() ? "\(Int(seconds))s" : String(format: "%.1fs", seconds) }
        var rest = Int(seconds.rounded())
        var parts: [String] = []
        for (unit, size) in [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)] where rest >= size {
            parts.append("\(rest / size)\(unit)")
            rest %= size
        }
        return parts.prefix(2).joined(separator: " ")
    }
}
