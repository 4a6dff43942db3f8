import Foundation

/// BENCHMARKS.md, "SQL over PostgreSQL": the SQL workload of
/// `bench/postgres/` (insert, scan, point queries) over the Unix socket of
/// a throwaway server, opsh (`opsh run --db postgresql://…`) side by side
/// with Lua 5.4 + LuaSQL's PostgreSQL driver, CPython + psycopg 3 and C +
/// libpq, each in its own process on a table of its own, round-robin,
/// medians. A run whose checks (row count, sum of a column, sum of the ids
/// queried) are wrong has no figure.
enum PostgresBenchmarks {
    /// The issue's sizes; OPSH_BENCH_PG_ROWS and OPSH_BENCH_PG_POINTS make
    /// a quick trial of the harness (BENCHMARKS.md is written with these).
    static let rows = Int(ProcessInfo.processInfo.environment["OPSH_BENCH_PG_ROWS"] ?? "") ?? 200_000
    static let pointQueries = Int(ProcessInfo.processInfo.environment["OPSH_BENCH_PG_POINTS"] ?? "") ?? 20_000
    /// Runs per runtime, taken round-robin; the table shows medians.
    static let rounds = 3

    struct Timings {
        /// Elapsed milliseconds: insert, scan, point queries.
        var wall: [Double]
        /// The client process's CPU milliseconds, the same three.
        var cpu: [Double]
    }

    enum Outcome {
        case measured(Timings)
        case failed(String)
    }

    struct Peer {
        var name: String
        /// The command before `URL TABLE N Q`; nil: it could not be built.
        var command: [String]?
        var table: String
        var url: String
        /// Why it has no command.
        var missing: String = ""
    }

    static func run(directory: String, repository: String, opshExecutable: String) throws -> String {
        let folder = repository + "/bench/postgres"
        // Short: the socket's path has at most 107 bytes.
        let serverFolder = "/tmp/opsh-bpg-\(getpid())"
        let started = shell(["\(repository)/scripts/pg-server", "start", serverFolder], directory: directory)
        guard started.status == 0, let url = started.stdout.split(separator: "\n").last.map(String.init), url.hasPrefix("postgresql://") else {
            return "\n### SQL over PostgreSQL\n\nNot run: scripts/pg-server could not start a server (\(firstLine(started.stderr)))."
        }
        defer { _ = shell(["\(repository)/scripts/pg-server", "stop", serverFolder], directory: directory) }
        let psql = shell(["sh", "-c", "ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1"], directory: directory)
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        func sql(_ text: String, database: String = url) -> String? {
            let result = shell([psql.isEmpty ? "psql" : psql, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", database, "-c", text], directory: directory)
            return result.status == 0 ? result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) : nil
        }
        let version = sql("SHOW server_version").map { $0.split(separator: " ").first.map(String.init) ?? $0 } ?? "?"
        // opsh gets a database of its own: --create makes its schema there
        // (only in an empty database); the peers' tables live in `opsh`.
        let opshURL = url.replacingOccurrences(of: "/opsh?", with: "/opsh_bench?")
        _ = sql("CREATE DATABASE opsh_bench")

        let compiled = directory + "/postgres-c"
        let cc = shell(["cc", "-O2", "-o", compiled, folder + "/c.c", "-I/usr/include/postgresql", "-lpq"], directory: directory)
        let peers = [
            Peer(name: "opsh (Lua 5.4, db module)",
                 command: [opshExecutable, "run", "--no-lock", "--db", opshURL, "--create", folder + "/workload.lua"],
                 table: "bench_pg", url: ""),
            Peer(name: "LuaSQL 2.6 (lua-sql-postgres) on Lua 5.4", command: ["lua5.4", folder + "/luasql.lua"], table: "bench_pg_luasql", url: url),
            Peer(name: "CPython \(LuaBenchmarks.pythonVersion()) + psycopg \(psycopgVersion())", command: ["python3", folder + "/python.py"],
                 table: "bench_pg_python", url: url),
            Peer(name: "C + libpq (gcc -O2, prepared statements)", command: cc.status == 0 ? [compiled] : nil, table: "bench_pg_c", url: url,
                 missing: "cc failed: \(firstLine(cc.stderr))"),
        ]

        var samples = [[Timings]](repeating: [], count: peers.count)
        var failures = [String?](repeating: nil, count: peers.count)
        for _ in 0..<rounds {
            for (index, peer) in peers.enumerated() where failures[index] == nil {
                guard let command = peer.command else {
                    failures[index] = peer.missing
                    continue
                }
                // opsh takes its URL as --db; the peers take it first.
                let arguments = (peer.url.isEmpty ? command : command + [peer.url]) + [peer.table, String(rows), String(pointQueries)]
                switch measure(arguments, directory: directory) {
                case .measured(let timings): samples[index].append(timings)
                case .failed(let why): failures[index] = why
                }
            }
        }

        func median(_ runs: [Timings]) -> Timings {
            Timings(wall: (0..<3).map { part in Distribution(runs.map { $0.wall[part] }).median },
                    cpu: (0..<3).map { part in Distribution(runs.map { $0.cpu[part] }).median })
        }
        let results: [Timings?] = peers.indices.map { failures[$0] == nil ? median(samples[$0]) : nil }

        var lines = [
            "### SQL over PostgreSQL",
            "",
            "Insert \(rows.formatted()) rows `(id, name, value)` with parameters in one transaction, scan them (count, sum of `value`), "
                + "\(pointQueries.formatted()) point queries by primary key, over the Unix socket of a throwaway PostgreSQL \(version) "
                + "(`scripts/pg-server`: fsync off, on this machine; `bench/postgres/`, its README says how each runtime is clocked). "
                + "Each runtime in its own process on its own table, opsh as `opsh run --db postgresql://…`; elapsed ms, median of \(rounds) runs "
                + "taken round-robin; ratio = peer time / opsh time, so > 1 means opsh is faster. Every run's row count, sum and ids "
                + "were checked. Client CPU: the client process's own CPU ms (insert / scan / point), the server's is not in it.",
            "",
            "| runtime | insert | scan | point queries | insert ratio | scan ratio | point ratio | client CPU |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        let opsh = results[0]
        for (index, peer) in peers.enumerated() {
            guard let timings = results[index] else {
                let why = failures[index] ?? "failed"
                lines.append("| \(peer.name) | — | — | — | \(index == 0 ? "not run: " : "")\(why) | | | |")
                continue
            }
            func ratio(_ part: Int) -> String {
                guard let opsh else { return "—" }
                return String(format: "%.2f×", timings.wall[part] / opsh.wall[part])
            }
            let cpu = timings.cpu.map { String(format: "%.0f", $0) }.joined(separator: " / ")
            lines.append("| \(peer.name) | \(ms(timings.wall[0])) | \(ms(timings.wall[1])) | \(ms(timings.wall[2])) | "
                + "\(ratio(0)) | \(ratio(1)) | \(ratio(2)) | \(cpu) ms |")
        }
        lines.append("")
        if let opsh {
            let luaAndPython = [results[1], results[2]]
            let measuredAll = luaAndPython.allSatisfy { $0 != nil }
            let beatsAll = luaAndPython.compactMap { $0 }.allSatisfy { peer in (0..<3).allSatisfy { peer.wall[$0] > opsh.wall[$0] } }
            var target = "Target: opsh faster than every Lua and Python peer on all three — **"
                + (measuredAll ? (beatsAll ? "met" : "not met") : "not measured (a peer did not run)") + "**."
            if let c = results[3] {
                target += String(format: " opsh / C + libpq: insert %.2f×, scan %.2f×, point %.2f×.",
                                 opsh.wall[0] / c.wall[0], opsh.wall[1] / c.wall[1], opsh.wall[2] / c.wall[2])
            }
            lines.append(target)
        } else {
            lines.append("Target: opsh faster than every Lua and Python peer on all three — **not measured** (opsh did not run).")
        }
        return "\n" + lines.joined(separator: "\n")
    }

    /// One run; its figures when it succeeded and its checks hold.
    static func measure(_ command: [String], directory: String) -> Outcome {
        let result = shell(command, directory: directory)
        guard result.status == 0 else {
            return .failed("failed (status \(result.status): \(firstLine(result.stderr)))")
        }
        let fields = result.stdout.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { Double($0) }
        guard fields.count == 9 else { return .failed("printed \"\(firstLine(result.stdout))\"") }
        guard fields[6] == Double(rows), fields[7] == expectedValueSum, fields[8] == expectedIDSum else {
            return .failed(String(format: "wrong results: %.0f rows, sum %.1f, ids %.0f (expected %d, %.1f, %.0f)",
                                   fields[6], fields[7], fields[8], rows, expectedValueSum, expectedIDSum))
        }
        return .measured(Timings(wall: Array(fields[0..<3]), cpu: Array(fields[3..<6])))
    }

    /// Σ i·0.5 for i in 1…N: exact in a Double (multiples of 0.5 below 2⁵³).
    static var expectedValueSum: Double { Double(rows) * Double(rows + 1) / 4 }

    static var expectedIDSum: Double {
        (1...pointQueries).reduce(0.0) { $0 + Double(($1 * 7919) % rows + 1) }
    }

    static func psycopgVersion() -> String {
        let result = shell(["python3", "-c", "import psycopg; print(psycopg.__version__, psycopg.pq.__impl__)"], directory: NSTemporaryDirectory())
        return result.status == 0 ? result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) : "(not installed)"
    }

    static func ms(_ value: Double) -> String { String(format: "%.0f ms", value) }

    static func firstLine(_ text: String) -> String {
        let line = text.split(separator: "\n").first.map(String.init) ?? ""
        return String(line.prefix(200)).replacingOccurrences(of: "|", with: "\\|")
    }

    /// Runs a command in `directory`: its status, stdout and stderr,
    /// through system(3) with both redirected to files. Not Foundation's
    /// Process: on Linux it waits for a descriptor its child holds to close,
    /// and the server `scripts/pg-server start` leaves running inherits it,
    /// so the wait never ends.
    static func shell(_ command: [String], directory: String) -> (status: Int32, stdout: String, stderr: String) {
        func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let base = directory + "/postgres-\(UUID().uuidString)"
        defer {
            for suffix in [".out", ".err"] { try? FileManager.default.removeItem(atPath: base + suffix) }
        }
        let line = "cd \(quoted(directory)) && exec " + command.map(quoted).joined(separator: " ")
            + " </dev/null >\(quoted(base + ".out")) 2>\(quoted(base + ".err"))"
        let status = system(line)
        let read = { (suffix: String) in (try? String(contentsOfFile: base + suffix, encoding: .utf8)) ?? "" }
        // The exit status, as WEXITSTATUS; a signal shows as 128 + its number.
        let code: Int32 = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (code, read(".out"), read(".err"))
    }
}
