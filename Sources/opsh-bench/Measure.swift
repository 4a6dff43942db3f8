import Foundation

/// Monotonic time in seconds.
func now() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

/// Wall-clock time in seconds since 1970 (comparable across processes).
func wallClock() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

/// Median and tail of a set of samples.
struct Distribution {
    var samples: [Double]

    init(_ samples: [Double]) { self.samples = samples.sorted() }

    func percentile(_ p: Double) -> Double {
        guard !samples.isEmpty else { return .nan }
        let index = min(samples.count - 1, Int((p / 100 * Double(samples.count)).rounded(.up)) - 1)
        return samples[max(0, index)]
    }

    var median: Double { percentile(50) }
}

/// One line of the results table.
struct Result {
    var name: String
    var value: String
    var target: String
    var verdict: String
}

func formatRate(_ value: Double) -> String {
    value >= 1e6 ? String(format: "%.2f M", value / 1e6) : String(format: "%.0f k", value / 1e3)
}

func formatDuration(_ seconds: Double) -> String {
    if seconds < 1e-3 { return String(format: "%.1f µs", seconds * 1e6) }
    if seconds < 1 { return String(format: "%.1f ms", seconds * 1e3) }
    return String(format: "%.2f s", seconds)
}
