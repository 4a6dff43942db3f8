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
            // Trimmed without Foundation's CharacterSet: this runs at every
            // start-up, where bridging to NSString was a measurable part.
            let line = trimmed(rawLine)
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

    private static func trimmed(_ text: Substring) -> Substring {
        let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let first = text.firstIndex(where: { !blank($0) }), let last = text.lastIndex(where: { !blank($0) }) else { return "" }
        return text[first...last]
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
    /// passed, plus the grace, since their last successful run. Rows in
    /// `untrusted` (those that do not fit the trail's hash chain,
    /// ``AuditChain/Verdict/untrusted``) count for nothing: a row anyone
    /// with INSERT could add must not silence the switch.
    /// - parameter grace: seconds; nil: ``defaultGrace(for:)``.
    public static func overdue(_ db: some RepositoryConnection, now: Double, grace: Double? = nil,
                               untrusted: Set<Int64> = []) throws -> [Overdue] {
        guard let tables = try AuditTrail.tables(db) else { throw AuditTrailError.missing }
        let result = try db.fetch("""
            SELECT id, script, period, status, dryRun, startedAt FROM \(tables.audit)
            WHERE mode = 'run' AND script IS NOT NULL AND script <> '-'
            ORDER BY startedAt
            """, [])
        func number(_ value: StoreValue) -> Double? {
            switch value {
            case let .real(number): number
            case let .integer(number): Double(number)
            default: nil
            }
        }
        var byScript: [String: Runs] = [:]
        for row in result.rows {
            guard let id = AuditChain.integer(row[0]), !untrusted.contains(id), let script = row[1].textValue,
                  let startedAt = number(row[5]) else { continue }
            var runs = byScript[script] ?? Runs()
            // Rows come oldest first: the latest run's period wins.
            runs.period = number(row[2])
            if runs.firstRun == nil { runs.firstRun = startedAt }
            if AuditChain.integer(row[3]) == 0 && AuditChain.integer(row[4]) == 0 {
                runs.lastSuccess = max(runs.lastSuccess ?? startedAt, startedAt)
            }
            byScript[script] = runs
        }
        var late: [Overdue] = []
        // By the script's bytes, as the trail's text is ordered on both engines.
        for script in byScript.keys.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) {
            let runs = byScript[script]!
            guard let period = runs.period else { continue }
            let from = runs.lastSuccess ?? runs.firstRun ?? now
            let allowed = grace ?? defaultGrace(for: period)
            if now > from + period + allowed {
                late.append(Overdue(script: script, period: period, grace: allowed, lastSuccess: runs.lastSuccess,
                                    dueSince: from + period))
            }
        }
        return late
    }

    /// A script's trusted runs, as ``overdue(_:now:grace:untrusted:)`` adds them up.
    private struct Runs {
        var period: Double?
        var lastSuccess: Double?
        var firstRun: Double?
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
