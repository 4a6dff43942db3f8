import Foundation
import Store

// Until the shell lands, opsh opens (creating and migrating) the database
// and prints its statistics.
let arguments = Array(CommandLine.arguments.dropFirst())
var path: String?
var readOnly = false
var index = 0
while index < arguments.count {
    switch arguments[index] {
    case "--db":
        index += 1
        guard index < arguments.count else {
            FileHandle.standardError.write(Data("opsh: --db needs a path\n".utf8))
            exit(2)
        }
        path = arguments[index]
    case "--read-only":
        readOnly = true
    case "-h", "--help":
        print("usage: opsh [--db PATH] [--read-only]")
        exit(0)
    default:
        FileHandle.standardError.write(Data("opsh: unknown argument '\(arguments[index])'\n".utf8))
        exit(2)
    }
    index += 1
}

do {
    let store = try Store.open(path: path, options: StoreOptions(readOnly: readOnly))
    let stats = try store.statistics()
    print("database: \(stats.path ?? ":memory:")")
    print("size: \(stats.fileSize) bytes, WAL \(stats.walSize) bytes, \(stats.pageCount) pages of \(stats.pageSize) bytes, \(stats.freePageCount) free")
    print("migrations: \(stats.migrations.joined(separator: ", "))")
    for (table, rows) in stats.rowCounts {
        print("  \(table.padding(toLength: 20, withPad: " ", startingAt: 0)) \(rows)")
    }
} catch {
    FileHandle.standardError.write(Data("opsh: \(error)\n".utf8))
    exit(3)
}
