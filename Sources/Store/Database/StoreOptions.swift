import Foundation
import GRDB

/// How a ``Store`` opens its database.
public struct StoreOptions: Sendable {
    /// Open with SQLite's read-only flag, so that SQLite itself refuses
    /// every write. The file must exist and is never migrated.
    public var readOnly = false

    /// How long a statement waits for another connection's lock before it
    /// fails with "database is locked". The backend writes to the same file,
    /// so a zero timeout would surface its every write as an error.
    public var busyTimeout: TimeInterval = 5

    /// How often observations look for commits made by other processes
    /// (`PRAGMA data_version`).
    public var externalChangePollInterval: TimeInterval = 0.1

    /// Create the file and its folder when missing, and apply migrations.
    /// Off for read-only opens.
    public var createIfMissing = true

    /// Runs once the writer is open, before anything else uses it; what it
    /// throws fails the connection (a database that asks for a reason the
    /// run did not give: ``ReasonRequired``).
    public var afterConnecting: (@Sendable (any DatabaseWriter) throws -> Void)?

    public init(
        readOnly: Bool = false,
        busyTimeout: TimeInterval = 5,
        externalChangePollInterval: TimeInterval = 0.1
    ) {
        self.readOnly = readOnly
        self.busyTimeout = busyTimeout
        self.externalChangePollInterval = externalChangePollInterval
        self.createIfMissing = !readOnly
    }
}
