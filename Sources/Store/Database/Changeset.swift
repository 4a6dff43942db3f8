import CSQLiteStore
import Foundation
import GRDBSQLite

/// What a transaction changed, row by row (SQLite's session extension):
/// the shell keeps one per committed chunk for `undo()`, and re-applies one
/// after the operator confirmed a large chunk.
///
/// Made from the rows a connection kept (``ConnectionChanges/changeset()``):
/// only tables of `main` with a PRIMARY KEY are recorded, and schema
/// changes are not at all (``SessionDatabase``'s coverage check says
/// whether a changeset holds everything a transaction did). An UPDATE
/// carries the whole row before and after, so applying it (or its inverse)
/// refuses a row another writer changed in any column.
public final class Changeset: @unchecked Sendable {
    let bytes: UnsafeMutableRawPointer?
    let size: Int32

    init(bytes: UnsafeMutableRawPointer?, size: Int32) {
        self.bytes = bytes
        self.size = size
    }

    deinit { opsh_changeset_free(bytes) }

    public var isEmpty: Bool { size == 0 }
    public var byteCount: Int { Int(size) }

    /// The changeset that takes this one back.
    public func inverted() throws -> Changeset {
        var size: Int32 = 0
        var bytes: UnsafeMutableRawPointer?
        let code = opsh_changeset_invert(self.size, self.bytes, &size, &bytes)
        guard code == SQLITE_OK else { throw ChangesetError(code: code, action: "invert a changeset") }
        return Changeset(bytes: bytes, size: size)
    }

    /// Rows per table and operation, as a dry run reports them.
    public func summary() -> ChangeSummary {
        final class Box { var summary = ChangeSummary() }
        let box = Box()
        _ = withExtendedLifetime(box) {
            opsh_changeset_walk(size, bytes, { table, operation, context in
                let box = Unmanaged<Box>.fromOpaque(context!).takeUnretainedValue()
                // SQLite's operation codes: SQLITE_INSERT 18, SQLITE_UPDATE 23, SQLITE_DELETE 9.
                box.summary.count(String(cString: table!), operation == 18 ? .insert : operation == 23 ? .update : .delete)
            }, Unmanaged.passUnretained(box).toOpaque())
        }
        return box.summary
    }

    /// Applies this changeset on `connection` (inside its open
    /// transaction), all or nothing: when any row it touches was changed
    /// by someone else since, nothing is applied and the conflicts are
    /// returned, one line each.
    public func apply(on connection: OpaquePointer) throws -> [String] {
        var count: Int32 = 0
        var text: UnsafeMutablePointer<CChar>?
        let code = opsh_changeset_apply(connection, size, bytes, &count, &text)
        defer { opsh_changeset_free(text) }
        guard code == SQLITE_OK else {
            throw ChangesetError(code: code, action: "apply a changeset",
                                 detail: String(cString: sqlite3_errmsg(connection)))
        }
        guard count > 0 else { return [] }
        return text.map { String(cString: $0).split(separator: "\n").map(String.init) } ?? ["\(count) conflict(s)"]
    }
}

public struct ChangesetError: Error, CustomStringConvertible {
    public let code: Int32
    public let action: String
    public var detail: String? = nil
    public var description: String {
        "could not \(action) (SQLite result \(code)\(detail.map { ": " + $0 } ?? ""))"
    }
}
