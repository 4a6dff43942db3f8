import Foundation

/// A progress bar on the terminal for long work (cleanup, backup …): a
/// bar, the percentage, done of total, the rate and the time left,
/// redrawn in place on stderr at most ten times a second.
///
/// Nothing at all is written unless stderr is a terminal, so cron mails
/// and piped output stay clean.
///
/// ```swift
/// let bar = ProgressBar(label: "cleanup", unit: "rows")
/// bar.update(completed: 5000, total: 1_000_000)
/// bar.finish()
/// ```
public final class ProgressBar {
    public let label: String
    public let unit: String
    /// Where lines go; nil: nowhere (no terminal).
    private let output: ((String) -> Void)?
    private let start: Double
    private var lastDraw = -Double.infinity
    private var drawn = false
    private let interval: Double
    /// Seconds of work before anything is drawn: a short export shows nothing.
    private let delay: Double
    private let clock: () -> Double

    /// Cells of the bar itself.
    public static let barWidth = 24

    /// - parameters:
    ///   - output: for tests: receives each drawing (with its leading
    ///     `\r`); by default stderr when it is a terminal, else nothing.
    ///   - delay: seconds before the first drawing.
    ///   - clock: seconds, monotonic (tests pass their own).
    public init(label: String, unit: String = "", output: ((String) -> Void)? = ProgressBar.standardError,
                interval: Double = 0.1, delay: Double = 0, clock: @escaping () -> Double = ProgressBar.monotonicSeconds) {
        self.label = label
        self.unit = unit
        self.output = output
        self.interval = interval
        self.delay = delay
        self.clock = clock
        self.start = clock()
    }

    /// Whether anything is drawn.
    public var isVisible: Bool { output != nil }

    /// Draws the bar (throttled; the first and the last state always).
    public func update(completed: Int, total: Int) {
        guard let output else { return }
        let now = clock()
        guard now - start >= delay, completed >= total || now - lastDraw >= interval else { return }
        lastDraw = now
        drawn = true
        output("\r" + Self.render(label: label, unit: unit, completed: completed, total: total, elapsed: now - start) + "\u{1B}[K")
    }

    /// Draws work whose total is not known (rows of a query as they are
    /// written): `export  1,234,567 rows  412.3 k rows/s  0:03`.
    public func update(completed: Int) {
        guard let output else { return }
        let now = clock()
        guard now - start >= delay, now - lastDraw >= interval else { return }
        lastDraw = now
        drawn = true
        output("\r" + Self.render(label: label, unit: unit, completed: completed, elapsed: now - start) + "\u{1B}[K")
    }

    /// Erases the line the bar was drawn on (nothing if it never was):
    /// what follows on the terminal starts on a clean line.
    public func clear() {
        guard let output, drawn else { return }
        drawn = false
        output("\r\u{1B}[K")
    }

    /// Ends the line the bar was drawn on (nothing if it never was).
    public func finish() {
        guard let output, drawn else { return }
        drawn = false
        output("\n")
    }

    /// One drawing, without the carriage return:
    /// `cleanup ██████████▌             44%  440,000/1,000,000 rows  52.1 k rows/s  0:11 left`.
    public static func render(label: String, unit: String, completed: Int, total: Int, elapsed: Double) -> String {
        let fraction = total <= 0 ? 1 : min(1, max(0, Double(completed) / Double(total)))
        let eighths = Int((fraction * Double(barWidth * 8)).rounded(.down))
        var bar = String(repeating: "█", count: eighths / 8)
        if eighths % 8 > 0 { bar += BarChart.partials[eighths % 8] }
        bar += String(repeating: " ", count: barWidth - eighths / 8 - (eighths % 8 > 0 ? 1 : 0))
        let percent = String(format: "%3d%%", Int((fraction * 100).rounded(.down)))
        let units = unit.isEmpty ? "" : " " + unit
        var line = "\(label) \(bar) \(percent)  \(grouped(completed))/\(grouped(total))\(units)"
        if elapsed > 0, completed > 0 {
            let rate = Double(completed) / elapsed
            line += "  \(formatRate(rate))\(units.isEmpty ? "" : units)/s"
            if completed < total {
                line += "  \(formatClock(Double(total - completed) / rate)) left"
            } else {
                line += "  \(formatClock(elapsed))"
            }
        }
        return line
    }

    /// One drawing of work without a known total, without the carriage return.
    public static func render(label: String, unit: String, completed: Int, elapsed: Double) -> String {
        let units = unit.isEmpty ? "" : " " + unit
        var line = "\(label)  \(grouped(completed))\(units)"
        if elapsed > 0, completed > 0 { line += "  \(formatRate(Double(completed) / elapsed))\(units)/s" }
        return line + "  \(formatClock(elapsed))"
    }

    /// `1,234,567`.
    static func grouped(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var result = ""
        for (offset, digit) in digits.enumerated() {
            if offset > 0, (digits.count - offset) % 3 == 0 { result += "," }
            result.append(digit)
        }
        return (value < 0 ? "-" : "") + result
    }

    /// `850`, `52.1 k`, `1.25 M`.
    static func formatRate(_ rate: Double) -> String {
        if rate >= 1e6 { return String(format: "%.2f M", rate / 1e6) }
        if rate >= 1e3 { return String(format: "%.1f k", rate / 1e3) }
        return String(format: "%.0f", rate)
    }

    /// `0:07`, `12:30`, `1:02:03`.
    static func formatClock(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "?" }
        let total = Int(seconds.rounded(.up))
        let (hours, minutes, secs) = (total / 3600, total / 60 % 60, total % 60)
        return hours > 0 ? String(format: "%d:%02d:%02d", hours, minutes, secs) : String(format: "%d:%02d", minutes, secs)
    }

    /// stderr when it is a terminal, else nil.
    public static var standardError: ((String) -> Void)? {
        isatty(STDERR_FILENO) == 1 ? { text in FileHandle.standardError.write(Data(text.utf8)) } : nil
    }

    public static func monotonicSeconds() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }
}
