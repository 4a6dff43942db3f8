import Foundation
import Testing
@testable import Store

/// A PostgreSQL connection that reaches Store's SQLite opening (a route that
/// bypassed `Databases`) is refused as such, never made as a file of that
/// name, and named without its password.
@Suite struct ConnectionStringIsNotAFileTests {
    @Test(arguments: ["postgresql://ops:s3cret@db.internal/backend", "host=db.internal dbname=backend password=s3cret"])
    func aConnectionIsNotMadeAsAnSQLiteFile(_ connection: String) throws {
        var options = StoreOptions()
        options.createIfMissing = true
        #expect {
            _ = try Store.prepare(path: connection, options: options)
        } throws: { error in
            "\(error)".contains("this is a PostgreSQL database, not an SQLite file") && !"\(error)".contains("s3cret")
        }
        #expect(!FileManager.default.fileExists(atPath: connection))
    }
}
