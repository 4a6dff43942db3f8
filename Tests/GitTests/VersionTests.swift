import Testing
@testable import Git

@Suite struct VersionTests {
    @Test(arguments: ["1.2.0", "v2.0.0-beta.1", "1.0.0+build.5", "0.0.0", "10.20.30", "1.0.0-alpha-a.b-c-somethinglong+build.1-aef.1-its-okay",
                      "1.0.0-0.3.7", "1.0.0-x.7.z.92", "v1.0.0-rc.1+exp.sha.5114f85"])
    func validVersionsAreRead(text: String) throws {
        let version = try Version(parsing: text)
        #expect(version.tagName == text)
        #expect(Version.validate(text) == nil)
    }

    @Test(arguments: [
        ("release-foo", "found 1 part"), ("1.x.0", "minor version 'x' is not a number"), ("v1.2", "expected MAJOR.MINOR.PATCH, found 2 parts"), ("1.2.3.4", "found 4 parts"),
        ("01.2.3", "leading zero"), ("1.2.3-01", "leading zero"), ("1.2.3-", "empty identifier"),
        ("1.2.3+", "empty identifier"), ("1.2.3-a..b", "empty identifier"), ("1.2.3-a_b", "letters, digits"),
        ("", "empty"), ("v", "empty"), ("V1.2.3", "not a number"), ("latest", "found 1 part"), (" 1.2.3", "not a number"),
        ("99999999999999999999.0.0", "too large"),
    ])
    func invalidVersionsSayWhy(text: String, reason: String) {
        #expect(Version(text) == nil)
        let message = Version.validate(text)
        #expect(message?.contains(reason) == true, "\(message ?? "nil")")
        #expect(message?.contains("'\(text)' is not a semantic version") == true)
    }

    @Test func precedenceFollowsSemver() throws {
        // semver.org's own example chain, plus numeric ordering of parts.
        let ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
                       "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.9.0", "v1.10.0", "2.0.0-beta.1", "2.0.0"]
        let versions = try ordered.map { try Version(parsing: $0) }
        for (lower, higher) in zip(versions, versions.dropFirst()) {
            #expect(lower < higher, "\(lower.tagName) < \(higher.tagName)")
            #expect(!(higher < lower))
            #expect(lower != higher)
        }
        #expect(versions.shuffled().sorted().map(\.tagName) == ordered)
        #expect(try Version(parsing: "1.10.0") > Version(parsing: "1.9.0"))
        #expect(try Version(parsing: "1.0.0-alpha.10") > Version(parsing: "1.0.0-alpha.2"))
    }

    @Test func prefixAndBuildMetadataDoNotChangePrecedence() throws {
        let plain = try Version(parsing: "1.0.0")
        let tagged = try Version(parsing: "v1.0.0+build.7")
        #expect(plain == tagged)
        #expect(!(plain < tagged) && !(tagged < plain))
        #expect(Set([plain, tagged]).count == 1)
        #expect(tagged.tagName == "v1.0.0+build.7")
        #expect(tagged.description == "1.0.0+build.7")
        #expect(tagged.buildMetadata == ["build", "7"])
        #expect(try Version(parsing: "v2.0.0-beta.1").prerelease == [.alphanumeric("beta"), .numeric("1")])
        #expect(try Version(parsing: "2.0.0-beta.1").isPrerelease)
    }
}
