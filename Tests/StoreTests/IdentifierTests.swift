import Foundation
import Store
import Testing

/// `makeIdentifier()`: the ids repositories generate (schemes, builds,
/// log lines) are version 4 UUIDs in lowercase, as operators type them,
/// and never repeat, across the refills of its buffer of random bytes.
@Suite struct IdentifierTests {
    @Test func identifiersAreLowercaseVersion4UUIDsThatDoNotRepeat() {
        var seen = Set<String>()
        for _ in 0..<10_000 {  // 39 refills of the 256-id buffer
            let id = makeIdentifier()
            #expect(id.count == 36 && id == id.lowercased(), "\(id)")
            let parsed = UUID(uuidString: id)
            #expect(parsed?.uuidString.lowercased() == id, "\(id)")
            let characters = Array(id)
            #expect(characters[14] == "4", "\(id)")  // the version
            #expect("89ab".contains(characters[19]), "\(id)")  // the RFC 4122 variant
            seen.insert(id)
        }
        #expect(seen.count == 10_000)
    }
}
