import Foundation

/// BENCHMARKS.md, "Bulk writes over PostgreSQL" (issue 25, item 8): the
/// work of `bench/postgres-bulk/` over the Unix socket of one throwaway
/// server. N inserts in one transaction: opsh's `db.send` (pipelined) and
/// `db.exec` (one round trip a row) beside psycopg 3's `executemany` in
/// pipeline mode and C + libpq in pipeline mode; and a COPY of the same
/// rows from a CSV file: `db.copy` beside `psql \copy`; and
/// `telemetry.insertMany` of as many events. Each peer in its
/// own process on a table of its own, round-robin, medians.
enum BulkWriteBenchmarks {
    static let rows = Int(ProcessInfo.processInfo.environment["OPSH_BENCH_PG_ROWS"] ?? "") ?? 200_000
    static let rounds = 3

    struct Peer {
        var name: String
        /// nil: it could not be built (`missing` says why).
        var command: [String]?
        var missing = ""
        /// How the output gives the elapsed ms and the rows.
        var read: (String) -> (ms: Double, rows: Int)? = { output in
            let fields = output.split(whereSeparator: { $0 == " " || $0 == "\n" })
            guard fields.count == 2, let ms = Double(fields[0]), let rows = Int(fields[1]) else { return nil }
            return (ms, rows)
        }
    }

    static func run(directory: String, repository: String, opshExecutable: String) throws -> String {
        let folder = repository + "/bench/postgres-bulk"
        let shell = PostgresBenchmarks.shell
        let serverFolder = "/tmp/opsh-bulk-\(getpid())"
        let started = shell(["\(repository)/scripts/pg-server", "start", serverFolder], directory)
        guard started.status == 0, let url = started.stdout.split(separator: "\n").last.map(String.init), url.hasPrefix("postgresql://") else {
            return "\n### Bulk writes over PostgreSQL\n\nNot run: scripts/pg-server could not start a server (\(PostgresBenchmarks.firstLine(started.stderr)))."
        }
        defer { _ = shell(["\(repository)/scripts/pg-server", "stop", serverFolder], directory) }
        let psql = shell(["sh", "-c", "ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1"], directory)
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let psqlCommand = psql.isEmpty ? "psql" : psql
        let version = shell([psqlCommand, "-X", "-A", "-t", "-d", url, "-c", "SHOW server_version"], directory).stdout
            .split(separator: " ").first.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? "?"
        let opshURL = url.replacingOccurrences(of: "/opsh?", with: "/opsh_bulk?")
        _ = shell([psqlCommand, "-X", "-q", "-d", url, "-c", "CREATE DATABASE opsh_bulk"], directory)

        // The CSV every COPY reads: the rows the inserts write.
        let csv = directory + "/bulk.csv"
        var text = ""
        text.reserveCapacity(rows * 24)
        for i in 1...rows { text += "\(i),name\(i),\(Double(i) * 0.5)\n" }
        try text.write(toFile: csv, atomically: true, encoding: .utf8)

        let compiled = directory + "/bulk-c"
        let cc = shell(["cc", "-O2", "-o", compiled, folder + "/c.c", "-I/usr/include/postgresql", "-lpq"], directory)
        func opsh(_ mode: String, _ table: String) -> [String] {
            [opshExecutable, "run", "--no-lock", "--db", opshURL, "--create", folder + "/opsh.lua", table, String(rows), csv, mode]
        }
        let psqlCopy = Peer(
            name: "psql \\copy (PostgreSQL \(version))",
            command: ["sh", "-c", """
                "$0" -X -q -d "$1" -c 'DROP TABLE IF EXISTS bulk_psql' \
                  -c 'CREATE TABLE bulk_psql (id bigint PRIMARY KEY, name text NOT NULL, value double precision NOT NULL)' &&
                "$0" -X -d "$1" -c '\\timing on' -c "\\copy bulk_psql FROM '$2' CSV" &&
                "$0" -X -A -t -q -d "$1" -c 'SELECT count(*) FROM bulk_psql' -c 'DROP TABLE bulk_psql'
                """, psqlCommand, url, csv],
            read: { output in
                // "COPY N", "Time: X ms", then the count.
                guard let time = output.split(separator: "\n").first(where: { $0.hasPrefix("Time: ") }),
                      let ms = Double(time.dropFirst("Time: ".count).split(separator: " ").first ?? ""),
                      let rows = output.split(separator: "\n").last.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) }) else { return nil }
                return (ms, rows)
            })
        let inserts = [
            Peer(name: "opsh: db.send in db.transaction (pipelined)", command: opsh("send", "bulk_opsh_send")),
            Peer(name: "opsh: db.exec in db.transaction (a round trip a row)", command: opsh("exec", "bulk_opsh_exec")),
            Peer(name: "CPython \(LuaBenchmarks.pythonVersion()) + psycopg \(PostgresBenchmarks.psycopgVersion()): executemany, pipeline mode",
                 command: ["python3", folder + "/python.py", url, "bulk_python", String(rows), csv]),
            Peer(name: "C + libpq, pipeline mode (gcc -O2)", command: cc.status == 0 ? [compiled, url, "bulk_c", String(rows)] : nil,
                 missing: "cc failed: \(PostgresBenchmarks.firstLine(cc.stderr))"),
        ]
        let copies = [Peer(name: "opsh: db.copy of the CSV file", command: opsh("copy", "bulk_opsh_copy")), psqlCopy]
        // opsh's own table: the rows a repository writes, from Lua tables.
        let repository = [Peer(name: "opsh: telemetry.insertMany (one COPY)",
                               command: [opshExecutable, "run", "--no-lock", "--db", opshURL, "--create", folder + "/telemetry.lua", String(rows)])]
        let peers = inserts + copies + repository

        var samples = [[Double]](repeating: [], count: peers.count)
        var failures = [String?](repeating: nil, count: peers.count)
        for _ in 0..<rounds {
            for (index, peer) in peers.enumerated() where failures[index] == nil {
                guard let command = peer.command else {
                    failures[index] = peer.missing
                    continue
                }
                let result = shell(command, directory)
                guard result.status == 0 else {
                    failures[index] = "failed (status \(result.status): \(PostgresBenchmarks.firstLine(result.stderr)))"
                    continue
                }
                guard let (ms, written) = peer.read(result.stdout) else {
                    failures[index] = "printed \"\(PostgresBenchmarks.firstLine(result.stdout))\""
                    continue
                }
                guard written == rows else {
                    failures[index] = "wrote \(written) rows, not \(rows)"
                    continue
                }
                samples[index].append(ms)
            }
        }
        let medians: [Double?] = peers.indices.map { failures[$0] == nil ? Distribution(samples[$0]).median : nil }

        func table(_ range: Range<Int>, against reference: Int) -> [String] {
            var lines = ["| runtime | elapsed | rows/s | ratio |", "| --- | --- | --- | --- |"]
            for index in range {
                guard let ms = medians[index] else {
                    lines.append("| \(peers[index].name) | — | — | \(failures[index] ?? "failed") |")
                    continue
                }
                let ratio = medians[reference].map { String(format: "%.2f×", ms / $0) } ?? "—"
                lines.append("| \(peers[index].name) | \(PostgresBenchmarks.ms(ms)) | \(Int(Double(rows) / ms * 1000).formatted()) | \(ratio) |")
            }
            return lines
        }
        var lines = [
            "### Bulk writes over PostgreSQL",
            "",
            "\(rows.formatted()) rows `(id, name, value)` into a table of each runtime's own, over the Unix socket of a throwaway "
                + "PostgreSQL \(version) (`scripts/pg-server`; `bench/postgres-bulk/`, its README says how each is clocked); "
                + "elapsed ms, median of \(rounds) runs taken round-robin; ratio = its time / the first row's, so > 1 means the first is faster. "
                + "Every run's row count was checked.",
            "",
            "Inserts with bound parameters, one call per row, in one transaction:",
            "",
        ] + table(0..<inserts.count, against: 0) + [
            "",
            "COPY of the same rows from a CSV file:",
            "",
        ] + table(inserts.count..<inserts.count + copies.count, against: inserts.count) + [
            "",
            "\(rows.formatted()) telemetry events `(event, properties, session_id, created_at)` from Lua tables, into opsh's "
                + "`telemetry` table (its JSON CHECK on `properties`), in one call (before issue 25's item 8: multi-row INSERTs of "
                + "1,000 rows, one round trip each; `bench/postgres-bulk/telemetry.lua`):",
            "",
        ] + table(inserts.count + copies.count..<peers.count, against: inserts.count + copies.count) + [""]
        if let send = medians[0], let exec = medians[1] {
            let peersBeaten = [medians[2], medians[3]].allSatisfy { $0.map { $0 > send } ?? false }
            lines.append(String(format: "Target: db.send at least 5× db.exec (%.1f×) and ahead of psycopg's and libpq's pipeline modes — **%@**.",
                                exec / send, exec / send >= 5 && peersBeaten ? "met" : "not met"))
        }
        if let copy = medians[inserts.count], let psqlMs = medians[inserts.count + 1] {
            lines.append(String(format: " Target: db.copy at least 0.8× psql \\copy's speed (%.2f×) — **%@**.",
                                psqlMs / copy, psqlMs / copy >= 0.8 ? "met" : "not met"))
        }
        return "\n" + lines.joined(separator: "\n")
    }
}
