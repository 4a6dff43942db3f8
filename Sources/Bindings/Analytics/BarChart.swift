import Foundation
import TextCodec

/// Terminal charts from numbers: horizontal bars in eighths of a cell, and
/// sparklines.
enum BarChart {
    /// A cell filled 0/8 … 7/8 from the left.
    static let partials = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"]
    static let levels: [Character] = ["▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"]

    /// One bar per item: labels padded to the longest, bars scaled so the
    /// largest value fills `width` cells (padded to `width`, so values
    /// line up), then the value. Zero, negative, NaN and missing values get
    /// no bar. No items: `(no rows)`.
    ///
    /// ```
    /// llama  ████████████████████ 200
    /// phi    ██████████▌          105
    /// ```
    static func bars(_ items: [(label: String, value: Double?)], width: Int) -> String {
        guard !items.isEmpty else { return "(no rows)" }
        let width = max(1, width)
        let labelWidth = items.map { TextWidth.of($0.label) }.max() ?? 0
        let largest = items.compactMap { $0.value }.filter { $0.isFinite && $0 > 0 }.max() ?? 0
        return items.map { item in
            let padding = String(repeating: " ", count: labelWidth - TextWidth.of(item.label))
            var eighths = 0
            if let value = item.value, value.isFinite, value > 0, largest > 0 {
                eighths = Int((value / largest * Double(width * 8)).rounded())
                eighths = max(1, min(eighths, width * 8))
            }
            var bar = String(repeating: "█", count: eighths / 8) + partials[eighths % 8]
            bar += String(repeating: " ", count: width - (eighths + 7) / 8)
            return item.label + padding + " " + bar + " " + format(item.value)
        }.joined(separator: "\n")
    }

    /// `▁▂▃▄▅▆▇█` from the smallest to the largest value; all equal: `▁`
    /// each; NaN or missing: a space. No numbers: "".
    static func sparkline(_ values: [Double?]) -> String {
        let finite = values.compactMap { $0 }.filter { $0.isFinite }
        guard let low = finite.min(), let high = finite.max() else {
            return String(repeating: " ", count: values.count)
        }
        return String(values.map { value -> Character in
            guard let value, value.isFinite else { return " " }
            if high == low { return levels[0] }
            let index = Int(((value - low) / (high - low) * 7).rounded())
            return levels[max(0, min(7, index))]
        })
    }

    /// Integers without decimals, others with up to two; `nan`, `inf`, `-`.
    static func format(_ value: Double?) -> String {
        guard let value else { return "-" }
        if value.isNaN { return "nan" }
        if value.isInfinite { return value > 0 ? "inf" : "-inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        var text = String(format: "%.2f", value)
        while text.hasSuffix("0") { text.removeLast() }
        return text
    }
}
