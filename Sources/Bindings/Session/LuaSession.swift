import Foundation
import LuaRuntime
import Store

/// What the shell and the batch modes need of a Lua session, whatever
/// the engine under it: the runtime, the events other threads post for
/// the Lua thread, and the session's database (``DatabaseSession``).
/// ``LuaSessions/open(_:)`` makes one.
public protocol LuaSession: AnyObject {
    var runtime: LuaRuntime { get }
    var events: EventQueue { get }
    /// The session's database: every route of the modes and the REPL.
    var databaseSession: any DatabaseSession { get }
    var isSandboxed: Bool { get }
    /// Runs the events queued for the Lua thread (watch callbacks, a
    /// followed build's lines); errors of callbacks are returned.
    @discardableResult func deliverEvents() throws -> [LuaError]
    /// Lets go of a read snapshot shared by a burst of reads, before
    /// blocking.
    func releaseReadSnapshot()
    /// While set, a `db.query` whose result is the chunk's returned value
    /// writes its rows to stdout as it reads them (``ReturnedRows``).
    func writeReturnedRows(as format: ReturnedRowsFormat?)
}

/// Opens a session: the database the options name, on its engine
/// (``Databases``), and a Lua runtime with every module over it.
public enum LuaSessions {
    public struct Options {
        public var database: Databases.Options
        public var sandbox = false
        /// Bytes the Lua state may hold.
        public var memoryLimit: Int?
        /// Install the costlier modules on first use (the batch modes).
        public var lazyModules = false

        public init(database: Databases.Options) {
            self.database = database
        }
    }

    public static func open(_ options: Options) throws -> any LuaSession {
        try open(try Databases.openSession(options.database), options: options)
    }

    /// A session over a database already open.
    public static func open(_ database: any DatabaseSession, options: Options) throws -> any LuaSession {
        try OpshSession(database: database, options: .init(sandbox: options.sandbox, memoryLimit: options.memoryLimit,
                                                           lazyModules: options.lazyModules))
    }
}

extension OpshSession: LuaSession {
    public var databaseSession: any DatabaseSession { database }
    public var isSandboxed: Bool { options.sandbox }
    public func writeReturnedRows(as format: ReturnedRowsFormat?) { rows.writeReturnedRows(as: format) }
}
