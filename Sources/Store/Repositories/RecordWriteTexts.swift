import Foundation

/// The INSERT and UPDATE texts of ``RecordRepository``'s one-statement
/// writes, made once per table, engine, column set and references checked,
/// not per call: joining the quoted names was a tenth of a repository
/// write's time in a `db.transaction` loop (BENCHMARKS.md, "The domain
/// layer against hand-written SQL"). A repository writes a handful of
/// column sets, so the cache stays small; past `limit` texts it is
/// emptied (a script writing ever new column sets costs what it did).
final class RecordWriteTexts: @unchecked Sendable {
    struct Key: Hashable {
        let table: String
        let dialect: SQLDialect
        let isUpdate: Bool
        let columns: [String]
        /// The columns whose referenced row must exist (`WHERE EXISTS`).
        let references: [String]
    }

    static let shared = RecordWriteTexts()
    private static let limit = 1024

    private let lock = NSLock()
    private var texts: [Key: String] = [:]
    /// The last texts asked for, found by comparing keys: a loop writes
    /// one or two column sets, and hashing the key's names (SipHash, per
    /// name) cost more than comparing them (short names are compared as
    /// two words).
    private var recent: [(key: Key, text: String)] = []
    private static let recentLimit = 8

    func text(_ key: Key, make: () -> String) -> String {
        lock.lock()
        for entry in recent where entry.key == key {
            lock.unlock()
            return entry.text
        }
        if let known = texts[key] {
            remember(key, known)
            lock.unlock()
            return known
        }
        lock.unlock()
        let text = make()
        lock.lock()
        if texts.count >= Self.limit { texts.removeAll(keepingCapacity: true) }
        texts[key] = text
        remember(key, text)
        lock.unlock()
        return text
    }

    /// Under `lock`.
    private func remember(_ key: Key, _ text: String) {
        if recent.count >= Self.recentLimit { recent.removeLast() }
        recent.insert((key, text), at: 0)
    }
}
