import Foundation

// opsh's benchmarks. `scripts/bench` builds this in release mode, runs it,
// and writes the table it prints into BENCHMARKS.md.
//
//   opsh-bench [--only NAME]          run the benchmarks (or one section:
//                                     store, lua, postgres, runners, …), print Markdown
//   opsh-bench --writer PATH N SECS   (internal) the second process of the latency benchmark
//   opsh-bench --backend-writer PATH STOPFILE BUSY EVENT
//                                     (internal) the backend beside opsh (section "backend")
//   opsh-bench --count-logs PATH STOPFILE
//                                     (internal) a reader counting buildLogs (section "backend")

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "--writer", arguments.count == 4 {
    try StoreBenchmarks.runWriter(path: arguments[1], count: Int(arguments[2])!, interval: Double(arguments[3])!)
    exit(0)
}
if arguments.first == "--cleanup-writer", arguments.count == 3 {  // (internal) the writer of the cleanup benchmark
    try CleanupBenchmarks.runWriter(path: arguments[1], stopFile: arguments[2])
    exit(0)
}

if arguments.first == "--count-logs", arguments.count == 3 {  // (internal) the reader of the backend section's import
    try BackendBenchmarks.runLogCounter(path: arguments[1], stopFile: arguments[2])
    exit(0)
}

if arguments.first == "--backend-writer", arguments.count == 5 {
    try BackendBenchmarks.runWriter(path: arguments[1], stopFile: arguments[2], busyTimeout: Double(arguments[3])!, event: arguments[4])
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

/// Where the repository is: bench/ holds the peers' workloads.
let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
let only: String? = arguments.first == "--only" && arguments.count > 1 ? arguments[1] : nil
func wanted(_ name: String) -> Bool { only == nil || only == name }

if wanted("store") {
    let peer = StoreBenchmarks.compilePeer(repository: repository, directory: directory)
    section("Storage core", [
        try StoreBenchmarks.pointQueryByKey(directory: directory, peer: peer),
        try StoreBenchmarks.batchedTelemetryInsert(directory: directory, peer: peer),
        try StoreBenchmarks.crossProcessLatency(directory: directory, executable: executable, pollInterval: 0.1, writes: 50),
        try StoreBenchmarks.crossProcessLatency(directory: directory, executable: executable, pollInterval: 0.01, writes: 200),
    ])
}

if wanted("lua") {
    print("\n### Lua: SQL from scripts, side by side\n")
    let opsh = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("opsh").path
    print(try LuaBenchmarks.sqlWorkload(directory: directory, workloadFolder: repository + "/bench/sql-workload", opshExecutable: opsh))
    print("")
    print(SQLProfile.run(directory: directory, opshExecutable: opsh, rows: LuaBenchmarks.rows))
    print("")
    print(SQLProfile.perRow(directory: directory, opshExecutable: opsh, rows: LuaBenchmarks.rows))
    print("")
    print(try LuaBenchmarks.callCost())
}

if wanted("jobs") { section("Build jobs", try JobBenchmarks.logIngestion(directory: directory)) }

if wanted("cleanup") { print("\n" + (try CleanupBenchmarks.run(directory: directory, executable: executable))) }

if wanted("startup") { print("\n" + (try StartupBenchmarks.run(directory: directory, executable: executable))) }

if wanted("domain") { print("\n" + (try DomainBenchmarks.run(directory: directory, repository: repository))) }

if wanted("postgres") {
    let opsh = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("opsh").path
    print(try PostgresBenchmarks.run(directory: directory, repository: repository, opshExecutable: opsh))
}

if wanted("import") {
    let opsh = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("opsh").path
    print("\n" + (try ImportExportBenchmarks.run(directory: directory, opsh: opsh)))
}

if wanted("postgres-bulk") {
    let opsh = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("opsh").path
    print(try BulkWriteBenchmarks.run(directory: directory, repository: repository, opshExecutable: opsh))
}

if wanted("runners") {
    let opsh = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("opsh").path
    print(try RunnerBenchmarks.run(directory: directory, repository: repository, opshExecutable: opsh))
}

if wanted("backend") {
    do {
        print("\n" + (try BackendBenchmarks.run(directory: directory, executable: executable, repository: repository)))
    } catch let failed as BackendBenchmarks.CheckFailed {
        // A check behind a figure failed: no figure, and no BENCHMARKS.md.
        FileHandle.standardError.write(Data((failed.description + "\n").utf8))
        try? FileManager.default.removeItem(atPath: directory)
        exit(1)
    }
}
