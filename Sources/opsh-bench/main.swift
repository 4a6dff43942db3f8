import Foundation

// opsh's benchmarks. `scripts/bench` builds this in release mode, runs it,
// and writes the table it prints into BENCHMARKS.md.
//
//   opsh-bench [--only NAME]          run the benchmarks, print Markdown
//   opsh-bench --writer PATH N SECS   (internal) the second process of the latency benchmark

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "--writer", arguments.count == 4 {
    try StoreBenchmarks.runWriter(path: arguments[1], count: Int(arguments[2])!, interval: Double(arguments[3])!)
    exit(0)
}

let directory = NSTemporaryDirectory() + "opsh-bench-\(getpid())"
try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: directory) }
let executable = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL.path

func section(_ title: String, _ results: [Result]) {
    print("\n### \(title)\n")
    print("| benchmark | result | target | |")
    print("| --- | --- | --- | --- |")
    for result in results {
        print("| \(result.name) | \(result.value) | \(result.target) | \(result.verdict) |")
    }
}

section("Storage core", [
    try StoreBenchmarks.pointQueryByKey(directory: directory),
    try StoreBenchmarks.batchedTelemetryInsert(directory: directory),
    try StoreBenchmarks.crossProcessLatency(directory: directory, executable: executable, pollInterval: 0.1, writes: 50),
    try StoreBenchmarks.crossProcessLatency(directory: directory, executable: executable, pollInterval: 0.01, writes: 200),
])
