import Foundation
import Store
import Testing

/// `makeIdentifier()`: the ids repositories generate (schemes, builds,
/// log lines) are version 7 UUIDs in lowercase, as operators type them:
/// they never repeat, across the refills of its buffer of random bytes,
/// and one made later sorts after (the primary key's index stays in order).
@Suite struct IdentifierTests {
    @Test func identifiersAreLowercaseVersion7UUIDsThatDoNotRepeat() {
        var seen = Set<String>()
        for _ in 0..<10_000 {  // 39 refills of the 256-id buffer
            let id = makeIdentifier()
            #expect(id.count == 36 && id == id.lowercased(), "\(id)")
            let parsed = UUID(uuidString: id)
            #expect(parsed?.uuidString.lowercased() == id, "\(id)")
            let characters = Array(id)
            #expect(characters[14] == "7", "\(id)")  // the version
            #expect("89ab".contains(characters[19]), "\(id)")  // the variant
            seen.insert(id)
        }
        #expect(seen.count == 10_000)
    }

    @Test func anIdentifierMadeLaterSortsAfter() {
        let first = makeIdentifier()
        let start = Date()
        while Date().timeIntervalSince(start) < 0.002 {}  // the next milliseconds
        let second = makeIdentifier()
        #expect(first < second, "\(first) then \(second)")
        // Its first 48 bits are the time it was made, in milliseconds.
        let hex = second.replacingOccurrences(of: "-", with: "").prefix(12)
        let milliseconds = Double(UInt64(hex, radix: 16) ?? 0)
        #expect(abs(milliseconds / 1000 - Date().timeIntervalSince1970) < 60, "\(second)")
    }
}
