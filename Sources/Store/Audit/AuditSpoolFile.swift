import TextCodec

/// What one file of the audit spool (``AuditSpool``) holds: the database
/// the row belongs to and the row's fields, one JSON object. Members are
/// read by name, in any order, and a field without a value is absent (as
/// earlier opsh versions, which wrote the file with Foundation's encoder,
/// wrote it), so a file kept by one version is written by the next.
enum AuditSpoolFile {
    /// The file's document for `entry` of `database`.
    static func document(_ entry: AuditEntry, database: String) -> JSON {
        var members: [(String, JSON)] = [
            ("database", .string(database)), ("startedAt", .real(entry.startedAt)), ("endedAt", .real(entry.endedAt)),
            ("user", .string(entry.user)), ("host", .string(entry.host)), ("pid", .integer(Int64(entry.pid))),
            ("version", .string(entry.version)), ("mode", .string(entry.mode.rawValue)),
        ]
        for (name, text) in [("script", entry.script), ("scriptSHA256", entry.scriptSHA256), ("code", entry.code),
                             ("reason", entry.reason)] {
            if let text { members.append((name, .string(text))) }
        }
        members += [("dryRun", .bool(entry.dryRun)), ("readOnly", .bool(entry.readOnly)), ("changes", entry.changes.json),
                    ("status", .integer(Int64(entry.status)))]
        if let period = entry.period { members.append(("period", .real(period))) }
        return .object(members)
    }

    /// The database and the row a file's document holds; nil when a field
    /// is missing or of the wrong type (the file is not the spool's).
    static func read(_ document: JSON) -> (database: String, entry: AuditEntry)? {
        let fields = Fields(document: document)
        return try? (fields.required("database", \.stringValue),
                     AuditEntry(startedAt: fields.required("startedAt", \.numberValue),
                                endedAt: fields.required("endedAt", \.numberValue),
                                mode: fields.required("mode") { $0.stringValue.flatMap(AuditEntry.Mode.init(rawValue:)) },
                                script: fields.optional("script", \.stringValue),
                                scriptSHA256: fields.optional("scriptSHA256", \.stringValue),
                                code: fields.optional("code", \.stringValue),
                                reason: fields.optional("reason", \.stringValue),
                                dryRun: fields.required("dryRun", \.boolValue),
                                readOnly: fields.required("readOnly", \.boolValue),
                                changes: fields.required("changes", TableChanges.init(json:)),
                                status: fields.required("status") { $0.integerValue.flatMap { Int32(exactly: $0) } },
                                period: fields.optional("period", \.numberValue),
                                user: fields.required("user", \.stringValue),
                                host: fields.required("host", \.stringValue),
                                pid: fields.required("pid") { $0.integerValue.flatMap { Int32(exactly: $0) } },
                                version: fields.required("version", \.stringValue)))
    }

    /// An object's members read as Swift values; a member that is not
    /// what the caller expects throws ``Mismatch``.
    private struct Fields {
        struct Mismatch: Error {}
        let document: JSON

        func required<T>(_ name: String, _ value: (JSON) -> T?) throws -> T {
            guard let member = document[name], let result = value(member) else { throw Mismatch() }
            return result
        }

        /// Absent or null is nil.
        func optional<T>(_ name: String, _ value: (JSON) -> T?) throws -> T? {
            guard let member = document[name], !member.isNull else { return nil }
            guard let result = value(member) else { throw Mismatch() }
            return result
        }
    }
}
