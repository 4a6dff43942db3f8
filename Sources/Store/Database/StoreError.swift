import Foundation
import TextCodec

/// Errors of the storage core, each saying what was wrong and where.
public enum StoreError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The file exists but is not an SQLite database.
    case notADatabase(path: String)
    /// The file is an SQLite database whose content is damaged.
    case corrupt(path: String, detail: String)
    /// The database was migrated by a newer opsh.
    case newerSchema(path: String, unknownMigrations: [String])
    /// A read-only open of a file that does not exist.
    case missingDatabase(path: String)
    /// The file or its folder cannot be opened or created.
    case cannotOpen(path: String, detail: String)
    /// The database needs migrations but was opened read-only.
    case needsMigration(path: String, pending: [String])
    /// A value that the schema does not accept.
    case invalidValue(table: String, column: String, reason: String)
    /// A column that the table does not have.
    case unknownColumn(table: String, column: String, known: [String])
    /// A row that was expected but does not exist.
    case notFound(table: String, key: String)
    /// An operation refused because of related rows.
    case refused(reason: String)
    /// The file system holding `path` is full: nothing was kept.
    case diskFull(path: String)

    public var description: String {
        switch self {
        case let .notADatabase(path):
            return "\(path) is not an SQLite database (its header is not \"SQLite format 3\"); nothing was changed"
        case let .corrupt(path, detail):
            return "\(path) is a damaged SQLite database: \(detail); nothing was changed"
        case let .newerSchema(path, unknown):
            return "\(path) was migrated by a newer opsh (unknown migrations: \(unknown.joined(separator: ", "))); upgrade opsh to open it; nothing was changed"
        case let .missingDatabase(path):
            return "no database at \(path): opsh creates only its default database by itself; check the path, or pass --create to make this one (folders included); a read-only open never creates one"
        case let .cannotOpen(path, detail):
            return "cannot open \(path): \(detail)"
        case let .needsMigration(path, pending):
            return "\(path) needs migrations \(pending.joined(separator: ", ")) but was opened read-only"
        case let .invalidValue(table, column, reason):
            return "invalid value for \(table).\(column): \(reason)"
        case let .unknownColumn(table, column, known):
            return "unknown column '\(column)' in \(table) (columns: \(known.joined(separator: ", ")))"
        case let .notFound(table, key):
            return "no row in \(table) with key \(TextBytes.visible(key))"
        case let .refused(reason):
            return reason
        case let .diskFull(path):
            return "disk full: the file system of \(path) has no room left (database or disk is full); nothing was kept"
        }
    }
}
