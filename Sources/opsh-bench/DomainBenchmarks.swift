import Bindings
import Foundation
import LuaRuntime
import Store

/// Issue "One data path": the domain calls operators use (repositories,
/// query keys) against the hand-written `db` calls doing the same work, in
/// one process on one database, round-robin, as medians.
enum DomainBenchmarks {
    static let builds = 20_000

    static func run(directory: String) throws -> String {
        let path = directory + "/domain.sqlite"
        let store = try Store.open(path: path)
        let session = try OpshSession(store: store)
        session.runtime.register("monotonic") { call in call.results(.number(now())) }
        try session.runtime.execute("""
            projects.insert{ bundleIdentifier = 'bench.app', name = 'Bench', gitRepositoryURL = '/srv/bench' }
            scheme = schemes.insert{ projectBundleIdentifier = 'bench.app', name = 'Release', buildCommand = 'true', platforms = {'linux'} }
            ids = {}
            db.transaction(function()
              for i = 1, \(builds) do
                local id = string.format('b-%08d', i)
                db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES (?, ?, ?, ?, 'succeeded', ?)",
                        id, scheme.id, '1.0.' .. i, i, 1.7e9 + i)
                ids[i] = id
              end
            end)
            -- Each side runs `count` times; the mean per call, in seconds.
            function timed(count, body)
              local started = monotonic()
              for i = 1, count do body(i) end
              return (monotonic() - started) / count
            end
            """, chunkName: "=(bench setup)")

        struct Pair {
            let name: String
            let domain: String
            let sql: String
            let count: Int
            let perRow: Int?  // the rows each call returns, to report per row
        }
        let pairs = [
            Pair(name: "`builds.get(id)`", domain: "function(i) return builds.get(ids[i % \(builds) + 1]) end",
                 sql: "function(i) return db.first('SELECT * FROM builds WHERE id = ?', ids[i % \(builds) + 1]) end",
                 count: 20_000, perRow: nil),
            Pair(name: "`query(key.build(id))`", domain: "function(i) return query(key.build(ids[i % \(builds) + 1])) end",
                 sql: "function(i) return db.first('SELECT * FROM builds WHERE id = ?', ids[i % \(builds) + 1]) end",
                 count: 20_000, perRow: nil),
            Pair(name: "`builds.list{ limit = 1000 }`, per row", domain: "function(i) return builds.list{ limit = 1000 } end",
                 sql: "function(i) return db.query('SELECT * FROM builds ORDER BY rowid LIMIT 1000') end",
                 count: 40, perRow: 1000),
            Pair(name: "`builds.update(id, fields)`",
                 domain: "function(i) return builds.update(ids[i % \(builds) + 1], { status = (i % 2 == 0) and 'failed' or 'succeeded' }) end",
                 sql: "function(i) local id = ids[i % \(builds) + 1]; db.exec('UPDATE builds SET status = ? WHERE id = ?', (i % 2 == 0) and 'failed' or 'succeeded', id); return db.first('SELECT * FROM builds WHERE id = ?', id) end",
                 count: 5_000, perRow: nil),
            Pair(name: "`telemetry.insert(row)`",
                 domain: "function(i) return telemetry.insert{ event = 'bench', properties = '{\"i\":1}', session_id = 's' } end",
                 sql: "function(i) local _, id = db.exec('INSERT INTO telemetry (event, properties, session_id, created_at) VALUES (?, ?, ?, ?)', 'bench', '{\"i\":1}', 's', os.time()); return db.first('SELECT * FROM telemetry WHERE id = ?', id) end",
                 count: 5_000, perRow: nil),
        ]
        var lines = [
            "### The domain layer against hand-written SQL (issue \"One data path\")",
            "",
            "One process, one database of \(builds.formatted()) builds; each call outside a transaction, as a script makes it; the mean per call of each side, three rounds alternating the sides, the median round. Target: each domain call at most 2.0× its SQL.",
            "",
            "| operation | domain | hand-written SQL | ratio | target | |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for pair in pairs {
            var domain: [Double] = []
            var sql: [Double] = []
            for _ in 0..<3 {
                domain.append(try measure(session, pair.domain, pair.count))
                sql.append(try measure(session, pair.sql, pair.count))
            }
            let divisor = Double(pair.perRow ?? 1)
            let d = median(domain) / divisor
            let s = median(sql) / divisor
            let ratio = d / s
            lines.append(String(format: "| %@ | %.1f µs | %.1f µs | %.2f× | ≤ 2.0× | %@ |",
                                pair.name, d * 1e6, s * 1e6, ratio, ratio <= 2.0 ? "met" : "**missed**"))
        }
        return lines.joined(separator: "\n")
    }

    static func measure(_ session: OpshSession, _ body: String, _ count: Int) throws -> Double {
        let values = try session.runtime.execute("return timed(\(count), \(body))", chunkName: "=(bench)")
        guard case let .number(seconds)? = values.first else { throw BenchError("no time from \(body)") }
        return seconds
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted[sorted.count / 2]
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
