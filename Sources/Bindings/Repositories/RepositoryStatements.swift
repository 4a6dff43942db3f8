import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store

/// The repositories' reads on the `db` module's own machinery (issue "One
/// data path"): a statement prepared once and cached on the connection
/// the session reads from (the open transaction's, else the read
/// connection and its short snapshot), stepped in C, and each row built
/// once, straight into a Lua table with the `db` module's row metatable.
///
/// The SQL a repository runs is fixed per table and operation (`SELECT *
/// FROM "builds" WHERE "id" = ?`); its Lua string is kept in the registry
/// so that the statement cache, keyed by that string, finds it again.
final class RepositoryStatements {
    let executor: SQLExecutor
    /// Registry references of the SQL strings, by text.
    private var strings: [String: Int32] = [:]
    /// Past this many texts (lists with many filter shapes), a text is
    /// pushed anew each time and its statement prepared again.
    private static let keptTexts = 512

    /// Each table's columns, with the schema version they were read at
    /// and the session's ``SessionDatabase/schemaRollbacks`` then: a
    /// rolled-back schema change gives its version number back, and the
    /// next change takes it again for another schema.
    private var specs: [String: (version: Int64, rollbacks: Int, spec: TableSpec)] = [:]
    /// `PRAGMA schema_version`, prepared once per connection.
    private var versionStatements: [OpaquePointer: OpaquePointer] = [:]

    /// What every repository call reads and writes (the last spec, the
    /// transaction's version, the recent texts), in memory of its own:
    /// as the class's stored properties each access was checked for
    /// exclusivity at run time, a few times a call (issue 27). Only this
    /// class touches it, on the session's thread.
    private struct Hot {
        var lastSpec: LastSpec?
        var transactionVersionSeen: (connection: OpaquePointer, epoch: Int, version: Int64)?
        var nextRecent = 0
    }
    private let hot: UnsafeMutablePointer<Hot>
    /// ``recentString(_:)``'s entries, as ``hot``.
    private static let recentCount = 4
    private let recent: UnsafeMutablePointer<RecentText>

    init(executor: SQLExecutor) {
        self.executor = executor
        hot = .allocate(capacity: 1)
        hot.initialize(to: Hot())
        recent = .allocate(capacity: Self.recentCount)
        recent.initialize(repeating: RecentText(), count: Self.recentCount)
    }

    deinit {
        hot.deinitialize(count: 1)
        hot.deallocate()
        recent.deinitialize(count: Self.recentCount)
        recent.deallocate()
        // One may be on the read connection (NOMUTEX): under its lock.
        let statements = versionStatements.values
        if let reader = executor.readConnection {
            reader.lending { _ in statements.forEach(opsh_sqlite_finalize) }
        } else {
            statements.forEach(opsh_sqlite_finalize)
        }
    }

    /// The table's columns as the schema has them now: read again only
    /// when the schema changed (a Lua migration adds a column), which one
    /// `PRAGMA schema_version` on the session's reading connection tells.
    func spec(_ table: String, load: () throws -> TableSpec) throws -> TableSpec {
        guard let version = try schemaVersion() else { return try load() }
        let rollbacks = executor.session.schemaRollbacks
        // A loop calls one table again and again: its name is the module's
        // one string, compared before the dictionary hashes it.
        if let last = hot.pointee.lastSpec, last.version == version, last.rollbacks == rollbacks, last.table == table {
            return last.spec
        }
        if let cached = specs[table], cached.version == version, cached.rollbacks == rollbacks {
            hot.pointee.lastSpec = LastSpec(table: table, version: version, rollbacks: rollbacks, spec: cached.spec)
            return cached.spec
        }
        let spec = try load()
        specs[table] = (version, rollbacks, spec)
        hot.pointee.lastSpec = LastSpec(table: table, version: version, rollbacks: rollbacks, spec: spec)
        return spec
    }

    /// The entry of ``specs`` the last call used: a class, so that reading
    /// it takes one reference, where an optional tuple was copied field by
    /// field through its value witnesses (issue 27).
    private final class LastSpec {
        let table: String
        let version: Int64
        let rollbacks: Int
        let spec: TableSpec
        init(table: String, version: Int64, rollbacks: Int, spec: TableSpec) {
            self.table = table
            self.version = version
            self.rollbacks = rollbacks
            self.spec = spec
        }
    }

    /// The read snapshot the last version was read in (its start and the
    /// session's write count): within one snapshot the schema cannot change.
    private var versionSnapshot: (started: Double, writes: Int, version: Int64)?

    /// The schema version seen where the session reads now; nil in memory.
    private func schemaVersion() throws -> Int64? {
        // The route's connection, not a wrapper made (and retained) for it.
        if let current = executor.session.route.pointee.transaction {
            versionSnapshot = nil
            return try transactionVersion(on: current)
        }
        hot.pointee.transactionVersionSeen = nil
        guard let reader = executor.readConnection else { return nil }
        try reader.ready()
        // The read connection is NOMUTEX: read under its lock.
        return try reader.lending { connection in
            reader.useSnapshot(writeCount: executor.session.writeCount)
            var snapshot: (started: Double, writes: Int)?
            let started = reader.snapshot.pointee.started
            if started != 0 {
                let writes = executor.session.writeCount
                if let known = versionSnapshot, known.started == started, known.writes == writes { return known.version }
                snapshot = (started, writes)
            }
            guard let version = try readVersion(on: connection) else { return nil }
            versionSnapshot = snapshot.map { ($0.started, $0.writes, version) }
            return version
        }
    }

    // ``Hot/transactionVersionSeen``: the version the open transaction
    // saw, with the session's ``SessionDatabase/schemaEpoch`` then.

    /// The schema version in the open transaction, read once per
    /// transaction and again only after the session may have changed the
    /// schema itself (``SessionDatabase/schemaEpoch``): once the
    /// transaction has read the schema, no other connection changes what
    /// it sees (SQLite's snapshot, its single writer), so a `PRAGMA
    /// schema_version` per repository call was a fixed cost of each
    /// (issue 27). Nil while SQLite has ended the transaction (a trigger's
    /// `RAISE(ROLLBACK)`): it took the transaction's schema changes back
    /// before opsh could count the rollback (``SessionDatabase/schemaRollbacks``),
    /// and another process may write; the table is read each time then.
    private func transactionVersion(on connection: OpaquePointer) throws -> Int64? {
        let epoch = executor.session.schemaEpoch
        let inTransaction = opsh_sqlite_autocommit(connection) == 0
        guard inTransaction else {
            hot.pointee.transactionVersionSeen = nil
            return nil
        }
        if let seen = hot.pointee.transactionVersionSeen, seen.connection == connection, seen.epoch == epoch {
            return seen.version
        }
        let version = try readVersion(on: connection)
        hot.pointee.transactionVersionSeen = version.map { (connection, epoch, $0) }
        return version
    }

    private func readVersion(on connection: OpaquePointer) throws -> Int64? {
        var statement = versionStatements[connection]
        var version: Int64 = 0
        let read = opsh_sql_schema_version(connection, &statement, &version) != 0
        if let statement { versionStatements[connection] = statement }
        return read ? version : nil
    }

    /// Runs `sql` with `arguments` and pushes what `db.first` (`.first`),
    /// `db.query` (`.rows`) or `db.value` (`.value`) would. The call's own
    /// arguments must have been read: the stack is replaced.
    func run(_ sql: String, _ arguments: [StoreValue], shape: ResultShape, call: LuaCall) throws -> Int32 {
        let state = call.state
        lua_settop(state, 0)
        pushText(sql, state)
        _ = lua_checkstack(state, Int32(arguments.count) + 4)
        for argument in arguments { Self.push(argument, state) }
        return try runPushed(shape: shape, call: call)
    }

    /// ``run(_:_:shape:call:)`` with one value (a row's key, read back
    /// after its write), without an array made for it.
    func run(_ sql: String, _ argument: StoreValue, shape: ResultShape, call: LuaCall) throws -> Int32 {
        let state = call.state
        lua_settop(state, 0)
        pushText(sql, state)
        _ = lua_checkstack(state, 4)
        Self.push(argument, state)
        return try runPushed(shape: shape, call: call)
    }

    /// ``run(_:_:shape:call:)`` with one value: the call's own argument at
    /// `index`, as Lua holds it, which the caller has checked is the value
    /// it would bind. A `get` by a text key then binds the script's own
    /// string, as `db.first` does, instead of a string made from it and
    /// pushed (hashed and interned) again (issue 27: `builds.get` on its
    /// own).
    func run(_ sql: String, luaArgumentAt index: Int32, shape: ResultShape, call: LuaCall) throws -> Int32 {
        let state = call.state
        _ = lua_checkstack(state, 4)
        pushText(sql, state)
        lua_pushvalue(state, index)
        // The text and the value to the bottom of the stack, the call's
        // arguments above them dropped: what the C path reads.
        lua_rotate(state, 1, 2)
        lua_settop(state, 2)
        return try runPushed(shape: shape, call: call)
    }

    /// Runs the SQL text at 1 with the values above it.
    private func runPushed(shape: ResultShape, call: LuaCall) throws -> Int32 {
        let state = call.state
        let status: Int32
        switch shape {
        case .first: status = opsh_sql_fast_first(state, executor.route)
        case .rows: status = opsh_sql_fast_query(state, executor.route)
        case .value: status = opsh_sql_fast_value(state, executor.route)
        case .changes: status = opsh_sql_fast_exec(state, executor.route)
        case .column: status = opsh_sql_fast_column(state, executor.route)
        }
        if status >= 0 { return status }
        if status == OPSH_RAISE {
            let message = LuaStack(state).string(at: -1) ?? "SQL error"
            throw LuaCallError.message(message)
        }
        // The first run of a statement, or what C leaves to Swift: the same
        // rules, and the statement is cached for the C path next time.
        return try executor.run(call: call.withStackAsArguments(), shape: shape)
    }

    /// What ``write(_:_:state:)`` did.
    enum Write {
        /// Stepped in C: the rows it changed and the connection's last
        /// inserted rowid.
        case done(changes: Int, rowid: Int64)
        /// Left to Store (no open transaction, a counted or dry run, a
        /// statement not prepared yet): nothing ran.
        case declined
        /// SQLite refused it (the `db.exec` message); `kept`: the rows it
        /// wrote before the refusal stayed (a trigger's `RAISE(FAIL)`, an
        /// `ON CONFLICT FAIL`) or it ended the transaction (`RAISE(ROLLBACK)`),
        /// else it was undone whole.
        case failed(String, kept: Bool)
    }

    /// Runs Store's write `sql` with `arguments` as `db.exec`'s C fast
    /// path runs a write (`opsh_sql_fast_exec`): on the open transaction's
    /// connection only, never in a dry run or a counted scope, the
    /// statement prepared once and its values bound from the Lua stack, no
    /// GRDB statement, no Swift binding (issue 27: a repository write in
    /// `db.transaction` was several times its hand-written SQL). Whatever
    /// C declines runs in Store as before; a declined statement is
    /// prepared here so that the next call finds it. The call's own
    /// arguments must have been read: the stack is emptied.
    func write(_ sql: String, _ arguments: [StoreValue], state: OpaquePointer) -> Write {
        write(sql, count: arguments.count, state: state) { push in arguments.forEach(push) }
    }

    /// ``write(_:_:state:)`` for a planned write, its values pushed as
    /// they are made (``PlannedWrite/forEachArgument(_:)``), no array.
    /// An update's key is bound from the call's argument `keyArgument`
    /// (the caller checked it is the same value) and, when C stepped it,
    /// is left at `keyArgument`'s index of the stack for the read-back
    /// (``run(_:luaArgumentAt:shape:call:)``): a string made from it
    /// and pushed again was hashed and interned twice a call (issue 27).
    func write(_ planned: PlannedWrite, keyArgument: Int32?, state: OpaquePointer) -> Write {
        guard let keyArgument, let keyPosition = planned.keyPosition, keyArgument >= 1, keyArgument <= lua_gettop(state) else {
            return write(planned.sql, count: planned.argumentCapacity, state: state) { push in
                planned.forEachArgument { (value: StoreValue) in push(value) }
            }
        }
        // The statement and its values above the call's arguments, the
        // key one of them; then the call's arguments dropped from below.
        let callArguments = lua_gettop(state)
        _ = lua_checkstack(state, Int32(planned.argumentCapacity) + 4)
        pushText(planned.sql, state)
        var position = 0
        planned.forEachArgument { (value: StoreValue) in
            if position == keyPosition { lua_pushvalue(state, keyArgument) } else { Self.push(value, state) }
            position += 1
        }
        lua_rotate(state, 1, -callArguments)
        lua_settop(state, -callArguments - 1)
        let result = step(state: state)
        if case .done = result {
            // The key to `keyArgument`, all else gone.
            lua_copy(state, 2 + Int32(keyPosition), keyArgument)
            lua_settop(state, keyArgument)
        } else {
            lua_settop(state, 0)
        }
        return result
    }

    /// ``write(_:keyArgument:state:)`` for a plan whose ``PlannedWrite/given``
    /// values are the script's own, in stack slots `slots + i` (column
    /// `i`; ``LuaRowReader/columnValues(argument:spec:layout:)``), above
    /// the call's arguments: each is bound as Lua holds it, no
    /// ``StoreValue`` made and pushed again (issue 27). The statement
    /// runs above the arguments, which stay whatever happens: the stack is
    /// left at `slots - 1`, so that the caller can read the row table
    /// again when C declined (``Write/declined``, ``Write/failed(_:kept:)``).
    func write(_ planned: PlannedWrite, keyArgument: Int32?, luaValuesAt slots: Int32, state: OpaquePointer) -> Write {
        defer { lua_settop(state, slots - 1) }
        _ = lua_checkstack(state, Int32(planned.argumentCapacity) + 4)
        pushText(planned.sql, state)
        let base = lua_gettop(state)
        let keyPosition = keyArgument == nil ? nil : planned.keyPosition
        var position = 0
        planned.forEachArgument { (argument: PlannedWrite.Argument) in
            switch argument {
            case let .given(column): lua_pushvalue(state, slots + Int32(column))
            case let .value(value):
                if position == keyPosition, let keyArgument { lua_pushvalue(state, keyArgument) } else { Self.push(value, state) }
            }
            position += 1
        }
        return step(state: state, base: base)
    }

    /// `arguments` calls its argument with each value, at most `count`.
    private func write(_ sql: String, count: Int, state: OpaquePointer,
                       arguments: ((StoreValue) -> Void) -> Void) -> Write {
        lua_settop(state, 0)
        defer { lua_settop(state, 0) }
        pushText(sql, state)
        _ = lua_checkstack(state, Int32(count) + 4)
        arguments { Self.push($0, state) }
        return step(state: state)
    }

    /// Steps the statement at `base` with the values above it (``write(_:_:state:)``).
    private func step(state: OpaquePointer, base: Int32 = 1) -> Write {
        // The route's connection, not a wrapper made (and retained) for it.
        let connection = executor.session.route.pointee.transaction
        let changesBefore = connection.map(opsh_sqlite_total_changes)
        let status = base == 1 ? opsh_sql_fast_exec(state, executor.route) : opsh_sql_fast_exec_at(state, executor.route, base)
        if status == 2 {
            return .done(changes: Int(lua_tointegerx(state, -2, nil)), rowid: Int64(lua_tointegerx(state, -1, nil)))
        }
        if status == OPSH_RAISE {
            // A trigger's RAISE(ROLLBACK) ended the transaction: run again,
            // it would only say "Transaction was aborted"; SQLite's words stand.
            let kept = connection.map(opsh_sqlite_total_changes) != changesBefore
                || connection.map(opsh_sqlite_autocommit) != 0
            return .failed(LuaStack(state).string(at: -1) ?? "SQL error", kept: kept)
        }
        if let current = executor.session.transactionConnection {
            // Prepared (and checked, as db.exec's are) for the C path;
            // Store runs it this time.
            _ = try? executor.statements.statement(for: state, at: base, on: current.handle)
        }
        return .declined
    }

    private func pushText(_ sql: String, _ state: OpaquePointer) {
        if let reference = recentString(sql) {
            lua_rawgeti(state, opsh_registryindex(), lua_Integer(reference))
            return
        }
        if let reference = strings[sql] {
            remember(sql, reference)
            lua_rawgeti(state, opsh_registryindex(), lua_Integer(reference))
            return
        }
        LuaStack(state).push(sql)
        guard strings.count < Self.keptTexts else { return }
        lua_pushvalue(state, -1)
        let reference = opsh_ref(state)
        strings[sql] = reference
        remember(sql, reference)
    }

    private func remember(_ sql: String, _ reference: Int32) {
        recent[hot.pointee.nextRecent] = RecentText(text: sql, reference: reference)
        hot.pointee.nextRecent = (hot.pointee.nextRecent + 1) % Self.recentCount
    }

    /// The texts a loop runs again and again (a write and its read back),
    /// found by comparing: a repository keeps each text as one string, so
    /// the comparison is of the same storage, where hashing the text
    /// (SipHash over its bytes) was a fiftieth of a repository call. The
    /// same string's two words are compared first, the text only when no
    /// entry is that string (comparing a write's text with its read's,
    /// and an array of optional tuples copied entry by entry, were a share
    /// of a call, issue 27).
    struct RecentText {
        var text = ""
        /// The string's two words: equal, the strings are equal.
        var words: (UInt64, UInt64) = (0, 0)
        /// 0 (never a registry reference): an entry not used yet.
        var reference: Int32 = 0

        init() {}

        init(text: String, reference: Int32) {
            self.text = text
            words = unsafeBitCast(text, to: (UInt64, UInt64).self)
            self.reference = reference
        }
    }

    private func recentString(_ sql: String) -> Int32? {
        let words = unsafeBitCast(sql, to: (UInt64, UInt64).self)
        for index in 0..<Self.recentCount where recent[index].reference != 0 && recent[index].words == words {
            return recent[index].reference
        }
        for index in 0..<Self.recentCount where recent[index].reference != 0 && recent[index].text == sql {
            return recent[index].reference
        }
        return nil
    }

    /// A bound value as Lua passes it to `db` (NULL as nil).
    static func push(_ value: StoreValue, _ state: OpaquePointer) {
        switch value {
        case .null, .array, .object: lua_pushnil(state)
        case let .integer(number): lua_pushinteger(state, lua_Integer(number))
        case let .real(number): lua_pushnumber(state, number)
        case let .text(text): LuaStack(state).push(text)
        case let .blob(bytes):
            bytes.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { _ = lua_pushlstring(state, $0.baseAddress, $0.count) }
            }
        }
    }
}
