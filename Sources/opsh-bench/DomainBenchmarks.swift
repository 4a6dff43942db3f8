import Bindings
import Foundation
import LuaRuntime
import Store

/// Issue "One data path": the domain calls operators use (repositories,
/// query keys) against the hand-written `db` calls doing the same work, in
/// one process on one database, round-robin, as medians; on both engines
/// (issue "One session under both engines": the same calls, the same
/// targets), each call outside a transaction, as a script makes it, and
/// inside `db.transaction`, as a repair script's loop makes it.
enum DomainBenchmarks {
    static let builds = 20_000
    /// Issue 27: each domain call at most 1.5× its hand-written SQL.
    static let target = 1.5
    /// Rounds per call, alternating the sides: five, so that the median
    /// holds while other builds share the machine's two cores.
    static let rounds = 5
    /// SQLite's calls inside a transaction take a few µs: ten times the
    /// calls, so that a round lasts long enough (tens of ms) that one
    /// collector cycle or cache spill does not decide it.
    static let sqliteTransactionScale = 10

    static func run(directory: String, repository: String) throws -> String {
        var lines = [
            "### The domain layer against hand-written SQL (issue \"One data path\")",
            "",
            "One process, one database of \(builds.formatted()) builds per engine; the mean per call of each side, \(rounds) rounds alternating the sides, the median round; each call outside a transaction (a script's), then inside `db.transaction` (a repair loop's, where no commit per call hides the layer's own cost; on SQLite ten times as many calls a round there). SQLite is a file; PostgreSQL a throwaway server on this machine (`scripts/pg-server`, a Unix socket). Target: each domain call at most 1.5× its SQL (issue 27, \"Ahead again\").",
            "",
            "| engine | operation | where | domain | hand-written SQL | ratio | target | |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        let store = try Store.open(path: directory + "/domain.sqlite")
        lines += try measure(OpshSession(store: store), engine: .sqlite)

        let serverFolder = "/tmp/opsh-dpg-\(getpid())"
        let started = PostgresBenchmarks.shell(["\(repository)/scripts/pg-server", "start", serverFolder], directory: directory)
        if started.status == 0, let url = started.stdout.split(separator: "\n").last.map(String.init), url.hasPrefix("postgresql://") {
            defer { _ = PostgresBenchmarks.shell(["\(repository)/scripts/pg-server", "stop", serverFolder], directory: directory) }
            // The server's `opsh` database is new and empty: --create's schema.
            let database = try PostgresDatabase(url: url, options: .init(create: true))
            lines += try measure(OpshSession(database: database), engine: .postgresql)
        } else {
            lines.append("| postgresql | not run: scripts/pg-server could not start a server | | | | | | |")
        }
        return lines.joined(separator: "\n")
    }

    struct Pair {
        let name: String
        let domain: String
        let sql: String
        let count: Int
        let perRow: Int?  // the rows each call returns, to report per row
    }

    /// The calls, with the hand-written SQL each engine's operator would
    /// write (PostgreSQL orders by `ctid` where SQLite has its rowid, and
    /// returns a new row's key with RETURNING).
    static func pairs(_ engine: DatabaseEngine) -> [Pair] {
        let id = "ids[i % \(builds) + 1]"
        let insertTelemetry = engine == .sqlite
            ? "local _, id = db.exec('INSERT INTO telemetry (event, properties, session_id, created_at) VALUES (?, ?, ?, ?)', 'bench', '{\"i\":1}', 's', os.time())"
            : "local id = db.value('INSERT INTO telemetry (event, properties, session_id, created_at) VALUES (?, ?, ?, ?) RETURNING id', 'bench', '{\"i\":1}', 's', os.time())"
        let insertLog = "db.exec('INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES (?, ?, ?, ?, ?, ?)', lid, ids[1], 'info', 'build', 'line', os.time())"
        return [
            Pair(name: "`builds.get(id)`", domain: "function(i) return builds.get(\(id)) end",
                 sql: "function(i) return db.first('SELECT * FROM builds WHERE id = ?', \(id)) end",
                 count: 10_000, perRow: nil),
            Pair(name: "`query(key.build(id))`", domain: "function(i) return query(key.build(\(id))) end",
                 sql: "function(i) return db.first('SELECT * FROM builds WHERE id = ?', \(id)) end",
                 count: 10_000, perRow: nil),
            Pair(name: "`builds.list{ limit = 1000 }`, per row", domain: "function(i) return builds.list{ limit = 1000 } end",
                 sql: "function(i) return db.query('SELECT * FROM builds ORDER BY \(engine == .sqlite ? "rowid" : "ctid") LIMIT 1000') end",
                 count: 20, perRow: 1000),
            Pair(name: "`builds.update(id, fields)`",
                 domain: "function(i) return builds.update(\(id), { status = (i % 2 == 0) and 'failed' or 'succeeded' }) end",
                 sql: "function(i) local id = \(id); db.exec('UPDATE builds SET status = ? WHERE id = ?', (i % 2 == 0) and 'failed' or 'succeeded', id); return db.first('SELECT * FROM builds WHERE id = ?', id) end",
                 count: 2_000, perRow: nil),
            Pair(name: "`telemetry.insert(row)`",
                 domain: "function(i) return telemetry.insert{ event = 'bench', properties = '{\"i\":1}', session_id = 's' } end",
                 sql: "function(i) \(insertTelemetry); return db.first('SELECT * FROM telemetry WHERE id = ?', id) end",
                 count: 2_000, perRow: nil),
            Pair(name: "`projects.update(id, fields)`",
                 domain: "function(i) return projects.update('bench.app', { displayName = 'Bench ' .. i }) end",
                 sql: "function(i) db.exec('UPDATE projects SET displayName = ? WHERE bundleIdentifier = ?', 'Bench ' .. i, 'bench.app'); return db.first('SELECT * FROM projects WHERE bundleIdentifier = ?', 'bench.app') end",
                 count: 2_000, perRow: nil),
            Pair(name: "`schemes.update(id, fields)`",
                 domain: "function(i) return schemes.update(scheme.id, { order = i }) end",
                 sql: "function(i) db.exec('UPDATE schemes SET \"order\" = ? WHERE id = ?', i, scheme.id); return db.first('SELECT * FROM schemes WHERE id = ?', scheme.id) end",
                 count: 2_000, perRow: nil),
            Pair(name: "`logs.insert(row)`",
                 domain: "function(i) return logs.insert{ buildId = ids[1], level = 'info', category = 'build', content = 'line' } end",
                 sql: "function(i) local lid = string.format('l-%d-%d', i, math.random(1e9)); \(insertLog); return db.first('SELECT * FROM buildLogs WHERE id = ?', lid) end",
                 count: 2_000, perRow: nil),
        ]
    }

    static func measure(_ session: OpshSession, engine: DatabaseEngine) throws -> [String] {
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
            -- Each side runs `count` times; the mean per call, in seconds:
            -- each call on its own, or all of them in one db.transaction.
            function timed(count, body, inTransaction)
              local started = monotonic()
              if inTransaction then
                db.transaction(function() for i = 1, count do body(i) end end)
              else
                for i = 1, count do body(i) end
              end
              return (monotonic() - started) / count
            end
            """, chunkName: "=(bench setup)")
        var lines: [String] = []
        for inTransaction in [false, true] {
            for pair in pairs(engine) {
                var domain: [Double] = []
                var sql: [Double] = []
                let count = pair.count * (inTransaction && engine == .sqlite ? sqliteTransactionScale : 1)
                for _ in 0..<rounds {
                    domain.append(try time(session, pair.domain, count, inTransaction))
                    sql.append(try time(session, pair.sql, count, inTransaction))
                }
                let divisor = Double(pair.perRow ?? 1)
                let d = median(domain) / divisor
                let s = median(sql) / divisor
                let ratio = d / s
                lines.append(String(format: "| %@ | %@ | %@ | %.1f µs | %.1f µs | %.2f× | ≤ \(target)× | %@ |",
                                    engine.rawValue, pair.name, inTransaction ? "in db.transaction" : "on its own",
                                    d * 1e6, s * 1e6, ratio, ratio <= target ? "met" : "**missed**"))
            }
        }
        return lines
    }

    static func time(_ session: OpshSession, _ body: String, _ count: Int, _ inTransaction: Bool) throws -> Double {
        let values = try session.runtime.execute("return timed(\(count), \(body), \(inTransaction))", chunkName: "=(bench)")
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
