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

    /// Instructions per row of one scan through `db.rows`, and of C's
    /// step + column_int64 loop, from callgrind (exact counts: a busy
    /// machine does not change them, as it changes CPU time). Run after
    /// ``run(directory:opshExecutable:rows:)``, whose database it scans.
    static func perRow(directory: String, opshExecutable: String, rows: Int) -> String {
        guard LuaBenchmarks.run(["valgrind", "--version"]) != nil else {
            return "Instructions per row: valgrind is not on this machine: no count in this run."
        }
        let database = directory + "/profile.sqlite"
        let scan = "SELECT qty FROM bench"
        let loop = "local sum = 0 for row in db.rows(\"%@\") do sum = sum + row.qty end return sum"
        let cLoop = """
            #include <sqlite3.h>
            #include <stdio.h>
            int main(int argc, char **argv) {
                sqlite3 *db;
                if (argc != 3 || sqlite3_open(argv[1], &db) != SQLITE_OK) return 2;
                long long sum = 0;
                sqlite3_stmt *scan;
                sqlite3_prepare_v2(db, argv[2], -1, &scan, 0);
                while (sqlite3_step(scan) == SQLITE_ROW) sum += sqlite3_column_int64(scan, 0);
                sqlite3_finalize(scan);
                printf("%lld\\n", sum);
                return 0;
            }
            """
        // valgrind 3.19 cannot read the DWARF 5 of Swift's release build;
        // a copy without the debug sections keeps the symbols it needs.
        let opsh = directory + "/opsh-with-symbols"
        let cScan = directory + "/c-scan"
        guard LuaBenchmarks.run(["strip", "--strip-debug", "-o", opsh, opshExecutable]) != nil,
              write(String(format: loop, scan), to: directory + "/count-scan.lua"),
              write(String(format: loop, scan + " LIMIT 1"), to: directory + "/count-one.lua"),
              write(cLoop, to: cScan + ".c"),
              LuaBenchmarks.run(["cc", "-O2", "-o", cScan, cScan + ".c", "-lsqlite3"]) != nil,
              let whole = counts([opsh, "run", "--no-lock", "--db", database, directory + "/count-scan.lua"], into: directory + "/scan.callgrind"),
              let one = counts([opsh, "run", "--no-lock", "--db", database, directory + "/count-one.lua"], into: directory + "/one.callgrind"),
              let c = counts([cScan, database, scan], into: directory + "/c.callgrind"),
              let cOne = counts([cScan, database, scan + " LIMIT 1"], into: directory + "/c-one.callgrind")
        else {
            return "Instructions per row: callgrind failed on this machine: no count in this run."
        }
        func perRow(_ value: Int?) -> String { String(format: "%.0f", Double(value ?? 0) / Double(rows)) }
        let part = { (name: String) in "`\(name)` \(perRow(whole[name]))" }
        return "Instructions per row of one scan of \(rows.formatted()) rows (callgrind, inclusive counts divided by the rows): "
            + "opsh \(perRow(whole["PROGRAM TOTALS"].map { $0 - (one["PROGRAM TOTALS"] ?? 0) })) "
            // The row is made inside rows_next (push_row is inlined there).
            + "(the iterator " + part("rows_next") + ": " + part("sqlite3_step")
            + "; the row table's parts " + ["lua_createtable", "luaH_resize", "luaC_step", "lua_rawset", "lua_setmetatable"].map(part).joined(separator: ", ")
            + "; the allocator's own " + part("opsh_alloc") + "; the rest is Lua's loop), "
            + "C \(perRow(c["PROGRAM TOTALS"].map { $0 - (cOne["PROGRAM TOTALS"] ?? 0) })) ("
            + ["sqlite3_step", "sqlite3_column_int64"].map { "`\($0)` \(perRow(c[$0]))" }.joined(separator: ", ") + ")."
    }

    /// callgrind's inclusive instruction count of each function of
    /// `command` (and "PROGRAM TOTALS"); nil when it fails.
    private static func counts(_ command: [String], into file: String) -> [String: Int]? {
        guard LuaBenchmarks.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + file] + command) != nil,
              let report = LuaBenchmarks.run(["callgrind_annotate", "--inclusive=yes", file])
        else { return nil }
        // Lines as "332,220,819 (82.07%)  ???:rows_next [/path]" or
        // "404,780,501 (100.0%)  PROGRAM TOTALS".
        var counts = [String: Int]()
        for line in report.split(separator: "\n") {
            let fields = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
            guard fields.count == 3, fields[1].hasPrefix("("), let count = Int(fields[0].replacingOccurrences(of: ",", with: "")) else { continue }
            var name = fields[2].trimmingCharacters(in: .whitespaces)
            if let bracket = name.range(of: " [") { name = String(name[..<bracket.lowerBound]) }
            if let colon = name.lastIndex(of: ":") { name = String(name[name.index(after: colon)...]) }
            counts[name] = max(counts[name] ?? 0, count)
        }
        return counts.isEmpty ? nil : counts
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
