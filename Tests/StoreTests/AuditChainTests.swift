import Foundation
import Testing
@testable import Store

/// The audit trail's hash chain in Store (issue 24, item 6): prune keeps
/// the chain checkable, rows removed through what the triggers allow are
/// named, concurrent appenders keep one chain, and the hash of a row is
/// fixed (a trail written by this opsh verifies with the next). On a real
/// SQLite file and a real PostgreSQL server; rows from another process
/// through the sqlite3 CLI or psql.
@Suite struct AuditChainTests {
    /// One database of `engine` with opsh's schema, and ways to reach it:
    /// the trail's own connection, a write transaction of a session's
    /// connection, and SQL from another process.
    struct Trail {
        let database: TestDatabase
        let store: Store?
        let postgres: PostgresDatabase?
        let directory: TemporaryDirectory

        init(_ engine: Engine) throws {
            directory = TemporaryDirectory()
            database = try TestDatabase.empty(engine, in: directory.path)
            switch engine {
            case .sqlite:
                store = try Store.open(path: database.db)
                postgres = nil
            case .postgresql:
                store = nil
                postgres = try PostgresDatabase(url: database.db, options: .init(create: true))
            }
        }

        /// A connection of the trail's own (a new one each time).
        func connection() -> AuditConnection {
            if let store { return .sqlite(store) }
            return .postgres(url: database.db, lockWait: 5)
        }

        /// Runs `body` in a write transaction of the session's connection.
        func write<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T {
            if let store { return try store.write { try body($0) } }
            return try postgres!.transaction { try body(postgres!) }
        }

        func verify() throws -> AuditChain.Verdict {
            try connection().verify()
        }
    }

    static func entry(startedAt: Double, status: Int32 = 0) -> AuditEntry {
        AuditEntry(startedAt: startedAt, endedAt: startedAt + 1, mode: .run, script: "/srv/job.lua",
                   scriptSHA256: String(repeating: "a", count: 64), changes: ["builds": .init(inserted: 1)],
                   status: status, period: 600, user: "cron", host: "ci-1", pid: 42, version: "test")
    }

    static let old = Date().timeIntervalSince1970 - 3 * 86400
    static let now = Date().timeIntervalSince1970

    /// Five rows, three of them three days old; ids 1…5.
    static func fill(_ trail: Trail) throws -> [AuditRowStamp] {
        let connection = trail.connection()
        return try [old, old + 1, old + 2, now, now + 1].map { try connection.append(entry(startedAt: $0), waitingAtMost: nil) }
    }

    @Test(arguments: Engine.allCases) func pruneCutsTheChainAtItsStartAndRecordsTheCut(_ engine: Engine) throws {
        let trail = try Trail(engine)
        let stamps = try Self.fill(trail)
        #expect(try trail.verify().holds)
        #expect(stamps[1].previousHash == stamps[0].hash)

        let pruned = try trail.write { try AuditTrail.prune(before: Self.now - 86400, $0) }
        #expect(pruned.deleted == 3)
        #expect(pruned.cut?.id == stamps[2].id)
        #expect(pruned.cut?.hash == stamps[2].hash)
        #expect(try trail.database.sql("SELECT lastHash FROM opsh_audit_cut ORDER BY id DESC LIMIT 1") == stamps[2].hash)
        var verdict = try trail.verify()
        #expect(verdict.holds, "\(verdict.misfits)")
        #expect(verdict.rows == 2)

        // The chain goes on after the cut.
        try trail.connection().append(Self.entry(startedAt: Self.now + 2), waitingAtMost: nil)
        verdict = try trail.verify()
        #expect(verdict.holds, "\(verdict.misfits)")
        #expect(verdict.summary.hasPrefix("the audit trail's chain holds: 3 rows, from row \(stamps[3].id) to row"), "\(verdict.summary)")
        // A cut is written only by prune, and never changed.
        #expect(throws: (any Error).self) {
            try trail.database.sql("INSERT INTO opsh_audit_cut (lastId, lastHash, cutAt) VALUES (99, 'x', 0)")
        }
        #expect(throws: (any Error).self) { try trail.database.sql("UPDATE opsh_audit_cut SET lastHash = 'x'") }
    }

    /// What the triggers allow (a permit at least a day old, then a DELETE
    /// of any row it covers) removes a row from the middle, or the chain's
    /// start without a cut: the chain names the row that no longer fits.
    @Test(arguments: Engine.allCases) func rowsRemovedWithAPermitAreNamed(_ engine: Engine) throws {
        let trail = try Trail(engine)
        let stamps = try Self.fill(trail)
        let permit = "INSERT INTO opsh_audit_prune (before) VALUES (\(Self.now - 2 * 86400))"
        try trail.database.sql("\(permit); DELETE FROM opsh_audit WHERE id = \(stamps[1].id); DELETE FROM opsh_audit_prune;")
        var verdict = try trail.verify()
        #expect(verdict.misfits.first?.row == stamps[2].id)
        #expect(verdict.summary.contains("its previous hash is not row \(stamps[0].id)'s hash"), "\(verdict.summary)")

        try trail.database.sql("\(permit); DELETE FROM opsh_audit WHERE id <= \(stamps[2].id); DELETE FROM opsh_audit_prune;")
        verdict = try trail.verify()
        #expect(verdict.misfits.first?.row == stamps[3].id)
        #expect(verdict.summary.contains("it is the first chained row but does not follow the start of the chain"), "\(verdict.summary)")
    }

    /// Two connections appending at once, each row in its own transaction:
    /// one chain (SQLite: the write transaction; PostgreSQL: the advisory
    /// lock each append takes).
    @Test(arguments: Engine.allCases) func concurrentAppendersKeepOneChain(_ engine: Engine) throws {
        let trail = try Trail(engine)
        let failures = Collector<String>()
        let done = Collector<Int>()
        for writer in 0..<2 {
            let target = trail.store.map { Target.sqlite($0) } ?? .postgres(trail.database.db)
            Thread.detachNewThread {
                let connection: AuditConnection = switch target {
                case let .sqlite(store): .sqlite(store)
                case let .postgres(url): .postgres(url: url, lockWait: 30)
                }
                for index in 0..<40 {
                    do {
                        try connection.append(Self.entry(startedAt: Self.now + Double(index), status: Int32(writer)), waitingAtMost: nil)
                    } catch {
                        failures.append("\(error)")
                    }
                }
                done.append(writer)
            }
        }
        #expect(done.wait(timeout: 120) { $0.count == 2 })
        #expect(failures.all.isEmpty, "\(failures.all)")
        let verdict = try trail.verify()
        #expect(verdict.holds, "\(verdict.misfits.prefix(3))")
        #expect(verdict.rows == 80)
    }

    enum Target: Sendable {
        case sqlite(Store)
        case postgres(String)
    }

    /// The bytes a row's hash covers are fixed: a trail this opsh wrote
    /// verifies with the next one.
    @Test func theHashOfARowIsPinned() {
        let entry = AuditEntry(startedAt: 1_700_000_000.25, endedAt: 1_700_000_001.5, mode: .run, script: "/srv/job.lua",
                               scriptSHA256: nil, code: "db.exec('x')\n", reason: "INC-1 \u{1}", dryRun: false,
                               changes: ["builds": .init(inserted: 1, updated: 2, deleted: 3)], status: 4, period: nil,
                               user: "cron", host: "ci-1", pid: 42, version: "0.16.0")
        #expect(AuditChain.hash(AuditChain.values(of: entry), previous: AuditChain.genesis)
            == "f819577022f5226df89618b469429414782addae5a3aec2777c009d5012bd90d")
    }

    /// The `changes` column's text is fixed too (the hash and the syslog
    /// line cover it): compact, tables and counts in byte order; it reads
    /// back as the same counts, and text that is not such a document as
    /// no changes.
    @Test func theChangesTextIsPinned() {
        let changes: TableChanges = ["telemetry": .init(inserted: 5, updated: 2, deleted: 1), "builds": .init(inserted: 1),
                                     "Ünï": .init(deleted: 7), "Projects": .init(updated: 3)]
        let text = AuditTrail.changesJSON(changes)
        #expect(text == #"{"Projects":{"deleted":0,"inserted":0,"updated":3},"builds":{"deleted":0,"inserted":1,"updated":0},"#
            + #""telemetry":{"deleted":1,"inserted":5,"updated":2},"Ünï":{"deleted":7,"inserted":0,"updated":0}}"#)
        #expect(AuditTrail.changes(fromJSON: text) == changes)
        #expect(AuditTrail.changesJSON([:]) == "{}")
        #expect(AuditTrail.changes(fromJSON: "{}") == [:])
        #expect(AuditTrail.changes(fromJSON: #"{"builds":"#) == [:])
        #expect(AuditTrail.changes(fromJSON: "[1]") == [:])
    }
}
