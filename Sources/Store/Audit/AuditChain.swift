import PostgresWire

/// The audit trail's hash chain (migration 005_auditChain): what makes the
/// trail tamper-evident rather than trusted to its triggers, which the
/// database's owner can drop and which REPLACE and TRUNCATE passed.
///
/// Each row written by opsh carries `previousHash`, the `hash` of the
/// chained row before it (or, for the first one after a cut, the hash the
/// cut recorded), and its own `hash`: SHA-256 over `previousHash` and the
/// row's columns as stored (``canonical(_:)``). Reading the rows in `id`
/// order, a row fits when its hash is that of its content and its
/// `previousHash` is the hash of the chained row before it. A row changed
/// after it was written, a row missing from the middle, a row added by
/// anything but opsh's append (no hash, or a hash that is not its
/// content's) do not fit. What the chain cannot show by itself — rows
/// removed from its end, or a row forged by someone who computes the hash
/// too — the syslog lines show (``AuditSyslog``): they hold each row's id
/// and hash where no script reaches.
public enum AuditChain {
    /// The `previousHash` of the first chained row of a database whose
    /// chain was never cut (migration 005's cut records it).
    public static let genesis = String(repeating: "0", count: 64)

    /// The columns the hash covers, in order, with how each is read back
    /// (both engines may hand an integral REAL back as an integer).
    static let columns: [(name: String, kind: Kind)] = [
        ("startedAt", .real), ("endedAt", .real), ("user", .text), ("host", .text), ("pid", .integer),
        ("version", .text), ("mode", .text), ("script", .text), ("scriptSHA256", .text), ("code", .text),
        ("reason", .text), ("dryRun", .integer), ("readOnly", .integer), ("changes", .text), ("status", .integer),
        ("period", .real),
    ]

    enum Kind { case real, integer, text }

    /// The row's columns as opsh binds them, in ``columns``' order.
    static func values(of entry: AuditEntry) -> [StoreValue] {
        func text(_ value: String?) -> StoreValue { value.map(StoreValue.text) ?? .null }
        return [.real(entry.startedAt), .real(entry.endedAt), .text(entry.user), .text(entry.host),
                .integer(Int64(entry.pid)), .text(entry.version), .text(entry.mode.rawValue), text(entry.script),
                text(entry.scriptSHA256), text(entry.code), text(entry.reason), .integer(entry.dryRun ? 1 : 0),
                .integer(entry.readOnly ? 1 : 0), .text(AuditTrail.changesJSON(entry.changes)),
                .integer(Int64(entry.status)), entry.period.map(StoreValue.real) ?? .null]
    }

    /// The bytes the hash covers: each column's name and value, the value
    /// typed and length-prefixed, so that no two rows share them; a REAL as
    /// its IEEE bits (exact on both engines).
    static func canonical(_ values: [StoreValue]) -> [UInt8] {
        var text = "opsh audit row v1\n"
        for (index, column) in columns.enumerated() {
            let value = index < values.count ? values[index] : .null
            text += column.name + "="
            switch (column.kind, value) {
            case (_, .null): text += "~"
            case (.real, .real(let number)): text += "r" + String(number.bitPattern, radix: 16)
            case (.real, .integer(let number)): text += "r" + String(Double(number).bitPattern, radix: 16)
            case (.integer, .integer(let number)): text += "i\(number)"
            case (.integer, .real(let number)) where number == number.rounded() && abs(number) < 9e18: text += "i\(Int64(number))"
            case (_, .text(let string)): text += "t\(string.utf8.count):" + string
            default: text += "?" + "\(value)"
            }
            text += "\n"
        }
        return Array(text.utf8)
    }

    /// The hash of a row whose columns are `values`, chained after `previous`.
    public static func hash(_ values: [StoreValue], previous: String) -> String {
        SHA256.hex(Array((previous + "\n").utf8) + canonical(values))
    }

    // MARK: Verifying

    /// A row that does not fit the chain, and why.
    public struct Misfit: Sendable, Equatable, CustomStringConvertible {
        public var row: Int64
        public var problem: String
        public var description: String { "row \(row) does not fit the audit trail's chain: \(problem)" }
    }

    /// What reading the whole trail found.
    public struct Verdict: Sendable, Equatable {
        /// Rows read.
        public var rows = 0
        /// Rows from before migration 005_auditChain (not chained).
        public var unchained = 0
        /// The first chained row and the last, by id.
        public var first: Int64?
        public var last: Int64?
        /// Every row that does not fit, in id order.
        public var misfits: [Misfit] = []
        /// Whether the database has the chain (migration 005 applied).
        public var hasChain = true

        public var holds: Bool { misfits.isEmpty }

        /// The ids of the rows that do not fit: what a reader must not trust.
        public var untrusted: Set<Int64> { Set(misfits.map(\.row)) }

        /// One sentence: the chain holds, or the first row that does not fit.
        public var summary: String {
            if !hasChain { return "this database's audit trail has no chain yet (migration \(Migration005AuditChain.identifier) is pending): run `opsh migrate`" }
            if let misfit = misfits.first {
                let more = misfits.count > 1 ? " (\(misfits.count - 1) more row\(misfits.count == 2 ? "" : "s") after it do not fit either)" : ""
                return misfit.description + more
            }
            var text = "the audit trail's chain holds: \(rows - unchained) row\(rows - unchained == 1 ? "" : "s")"
            if let first, let last { text += ", from row \(first) to row \(last)" }
            if unchained > 0 { text += "; \(unchained) older row\(unchained == 1 ? "" : "s") from before \(Migration005AuditChain.identifier) \(unchained == 1 ? "is" : "are") not chained" }
            return text
        }
    }

    /// Reads the whole trail in id order and checks each row against the
    /// chain (see the type's documentation). The cuts say where the chain
    /// starts: the first one (migration 005's) which older rows may stay
    /// unchained, the latest one (the last prune's) which hash the first
    /// chained row follows.
    public static func verify(_ db: some RepositoryConnection) throws -> Verdict {
        guard let tables = try AuditTrail.tables(db) else { throw AuditTrailError.missing }
        guard try AuditTrail.hasChain(db, tables) else { return Verdict(hasChain: false) }
        let cuts = try db.fetch("SELECT lastId, lastHash FROM \(tables.cut) ORDER BY id", []).rows
        let chainStart = cuts.first.flatMap { integer($0[0]) } ?? 0
        let latestCut: (id: Int64, hash: String)? = cuts.last.flatMap { row in
            guard let id = integer(row[0]), let hash = row[1].textValue else { return nil }
            return (id, hash)
        }
        let names = columns.map { db.dialect.quote($0.name) }.joined(separator: ", ")
        let result = try db.fetch("SELECT id, previousHash, hash, \(names) FROM \(tables.audit) ORDER BY id", [])
        var verdict = Verdict()
        // The last chained row read: its id and its stored hash.
        var previous: (id: Int64, hash: String)?
        for row in result.rows {
            verdict.rows += 1
            let id = integer(row[0]) ?? 0
            let previousHash = row[1].textValue
            let values = Array(row[3...])
            guard let hash = row[2].textValue else {
                if previous == nil && id <= chainStart {
                    verdict.unchained += 1
                } else {
                    verdict.misfits.append(Misfit(row: id, problem: "it has no hash: it was not written by opsh (the chain began after row \(chainStart))"))
                }
                continue
            }
            if verdict.first == nil { verdict.first = id }
            verdict.last = id
            defer { previous = (id, hash) }
            guard let previousHash else {
                verdict.misfits.append(Misfit(row: id, problem: "it has a hash but no previous hash: it was not written by opsh"))
                continue
            }
            if Self.hash(values, previous: previousHash) != hash {
                verdict.misfits.append(Misfit(row: id, problem: "its content does not match its hash: it was changed after it was written"))
                continue
            }
            if let previous {
                if previousHash != previous.hash {
                    verdict.misfits.append(Misfit(row: id, problem: "its previous hash is not row \(previous.id)'s hash: a row between them was removed, or row \(previous.id) was rewritten"))
                }
            } else if let latestCut {
                if id <= latestCut.id {
                    verdict.misfits.append(Misfit(row: id, problem: "it lies before row \(latestCut.id), where the chain was cut, yet it is chained"))
                } else if previousHash != latestCut.hash {
                    let cut = cuts.count > 1 ? "the hash audit.prune recorded when it cut the trail after row \(latestCut.id)"
                        : "the start of the chain"
                    verdict.misfits.append(Misfit(row: id, problem: "it is the first chained row but does not follow \(cut): rows before it were removed or rewritten"))
                }
            }
        }
        return verdict
    }

    static func integer(_ value: StoreValue) -> Int64? {
        switch value {
        case let .integer(number): number
        case let .real(number): Int64(exactly: number)
        default: nil
        }
    }
}
