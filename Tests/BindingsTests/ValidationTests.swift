import Foundation
import LuaRuntime
import Testing
@testable import Bindings

/// Values the repositories refuse, with what was wrong and nothing written
/// (issue 13, item 12); each with a control that works.
@Suite struct ValidationTests {
    let test = try! TestSession()

    func build() throws -> String {
        let id = try test.run("""
            projects.insert{ bundleIdentifier = "p", name = "P", gitRepositoryURL = "/x" }
            local s = schemes.insert{ projectBundleIdentifier = "p", name = "R", buildCommand = "make", platforms = { "linux" } }
            return builds.create(s.id, "1.0").id
            """)
        return id[0].stringValue!
    }

    @Test func aStatusThatIsNoneOfTheStatusesIsNamedAndNothingIsWritten() throws {
        let id = try build()
        #expect(test.failure("builds.update('\(id)', { status = 'exploded' })")
                == "test:1: invalid value for builds.status: 'exploded' is not one of queued, running, succeeded, failed, cancelled")
        #expect(try test.sqlite3("SELECT status FROM builds") == "queued")
        try test.run("builds.update('\(id)', { status = 'failed' })")
        #expect(try test.sqlite3("SELECT status FROM builds") == "failed")
    }

    @Test func aFilterOnADateTakesANumberOrADuration() throws {
        _ = try build()
        #expect(test.failure("builds.list{ where = { createdAt = { gt = 'yesterday' } } }")?.contains(
            "where.createdAt.gt: a number expected (dates are seconds since 1970; a duration such as \"1d\" or \"30m\" means that long ago), got 'yesterday'") == true)
        #expect(try test.run("return #builds.list{ where = { createdAt = { gt = '1d' } } }, #builds.list{ where = { createdAt = { lt = '1d' } } }") == [1, 0])
        #expect(try test.run("return builds.count{ where = { createdAt = { gt = os.time() - 60 } } }") == [1])
    }

    @Test func platformsTakeAListOnly() throws {
        _ = try build()
        for value in ["{ os = 'linux' }", "'{\"os\": 1}'"] {
            let failure = test.failure("schemes.insert{ projectBundleIdentifier = 'p', name = 'S', buildCommand = 'make', platforms = \(value) }")
            #expect(failure?.contains("field 'platforms': a list expected") == true, "\(value): \(failure ?? "nil")")
        }
        #expect(test.failure("schemes.insert{ projectBundleIdentifier = 'p', name = 'S', buildCommand = 'make', platforms = 'linux' }")?
            .contains("not valid JSON: linux") == true)
        #expect(try test.sqlite3("SELECT count(*) FROM schemes") == "1")
        try test.run("schemes.insert{ projectBundleIdentifier = 'p', name = 'S', buildCommand = 'make', platforms = { 'mac' } }")
        try test.run("schemes.insert{ projectBundleIdentifier = 'p', name = 'T', buildCommand = 'make', platforms = '[\"ios\"]' }")
        #expect(try test.sqlite3("SELECT count(*) FROM schemes") == "3")
    }
}
