import Foundation

/// Where the `db` path's time goes (issue 27 asks for the profile beside
/// the figures): `perf record` of `opsh run` scanning and inserting the rows
/// of `bench/sql-workload/`, and the top symbols `perf report` gives, from
/// this run. Without perf on the machine it says so instead.
enum SQLProfile {
    static let shown = 8
    /// Scans of the table in the profiled scan: enough samples to rank.
    static let scans = 10

    static func run(directory: String, opshExecutable: String, rows: Int) -> String {
        guard LuaBenchmarks.run(["perf", "--version"]) != nil else {
            return "Profile: `perf` is not on this machine (Debian's `linux-perf`): no profile in this run."
        }
        let insert = """
            db.exec("CREATE TABLE bench (id INTEGER PRIMARY KEY, name TEXT, score REAL, qty INTEGER)")
            db.transaction(function()
              for i = 1, \(rows) do
                db.exec("INSERT INTO bench (name, score, qty) VALUES (?, ?, ?)", "name" .. i, i * 0.5, i)
              end
            end)
            """
        let scan = """
            local sum = 0
            for _ = 1, \(scans) do
              for row in db.rows("SELECT qty FROM bench") do sum = sum + row.qty end
            end
            assert(sum == \(scans) * \(rows) * (\(rows) + 1) // 2)
            """
        let database = directory + "/profile.sqlite"
        for suffix in ["", "-wal", "-shm"] { unlink(database + suffix) }
        guard write(insert, to: directory + "/profile-insert.lua"), write(scan, to: directory + "/profile-scan.lua"),
              let inserting = top(record: [opshExecutable, "run", "--db", database, "--create", directory + "/profile-insert.lua"],
                                  into: directory + "/insert.perf"),
              let scanning = top(record: [opshExecutable, "run", "--no-lock", "--db", database, directory + "/profile-scan.lua"],
                                 into: directory + "/scan.perf")
        else {
            return "Profile: `perf record` or `perf report` failed on this machine: no profile in this run."
        }
        var lines = [
            "Profile of this run's opsh (`perf record` of `opsh run`, then `perf report --no-children --sort symbol`; share of each process's samples, start-up included): "
                + "the insert of \(rows.formatted()) rows as above, and \(scans) scans of them through `db.rows`.",
            "",
            "| | insert: symbol | share | scan: symbol | share |",
            "| --- | --- | --- | --- | --- |",
        ]
        for index in 0..<max(inserting.count, scanning.count) {
            func cell(_ entries: [(String, Double)]) -> String {
                index < entries.count ? "`\(entries[index].0)` | \(String(format: "%.1f %%", entries[index].1))" : "| "
            }
            lines.append("| \(index + 1) | \(cell(inserting)) | \(cell(scanning)) |")
        }
        return lines.joined(separator: "\n")
    }

    private static func write(_ text: String, to path: String) -> Bool {
        FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
    }

    /// Records `command` and returns its top symbols with their share of
    /// the samples; nil when perf fails.
    private static func top(record command: [String], into data: String) -> [(String, Double)]? {
        guard LuaBenchmarks.run(["perf", "record", "-q", "-F", "2999", "-o", data, "--"] + command) != nil,
              let report = LuaBenchmarks.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "symbol"])
        else { return nil }
        // Lines as "    12.34%  [.] symbol".
        let entries = report.split(separator: "\n").compactMap { line -> (String, Double)? in
            let fields = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
            guard fields.count == 3, fields[0].hasSuffix("%"), let share = Double(fields[0].dropLast()),
                  fields[1].hasPrefix("[") else { return nil }
            // The symbol ends where perf's padding to its next column starts.
            let symbol = fields[2].components(separatedBy: "  ")[0].trimmingCharacters(in: .whitespaces)
            return (symbol, share)
        }
        return entries.isEmpty ? nil : Array(entries.prefix(shown))
    }
}
