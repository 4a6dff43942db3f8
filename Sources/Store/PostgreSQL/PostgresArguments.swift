import PostgresWire
import TextCodec

/// A statement's values as PostgreSQL's parameters `$1 … $n`, by SQLite's
/// rules (``PostgresPlaceholders``), and what the server cannot be given
/// (issue 24, items 3 and 16). Every statement ``PostgresDatabase`` runs
/// with values passes here: the `db` module, the repositories, imports.
///
/// - Values given one by one bind `$k` to the k-th value, whatever the
///   placeholder's spelling (`?`, `?NNN`, `:name`, `$k`), as SQLite binds
///   them; their count must be the statement's placeholder count.
/// - A table of parameters gives `:name`s by name and `?`s by position;
///   each placeholder must have its value and each value its placeholder.
/// - Text with a NUL byte is refused, naming the value: PostgreSQL's text
///   cannot hold one, and the server's own refusal names neither the value
///   nor the parameter.
///
/// Anything else is ``PlaceholderMismatch``, in the words SQLite's side
/// uses; where the statement has a `?` placeholder, the error says that
/// jsonb's `?` operator is written `??`.
enum PostgresArguments {
    static func parameters(for statement: PostgresPlaceholders, _ arguments: PostgresDatabase.Arguments,
                           sql: String) throws -> [PostgresValue] {
        let hasQuestionMark = statement.sources.contains { if case .position = $0 { true } else { false } }
        let hint = hasQuestionMark ? PlaceholderMismatch.questionMarkHint : nil
        let count = statement.placeholderCount
        switch arguments {
        case let .positional(values):
            guard values.count == count else {
                throw PlaceholderMismatch.count(placeholders: count, given: values.count, hint: hint, sql: sql)
            }
            return try values.enumerated().map { offset, value in
                try parameter(value, name: label(statement, offset), sql: sql)
            }
        case let .table(positional, named):
            var parameters: [PostgresValue] = []
            parameters.reserveCapacity(count)
            var positions = 0
            var names: Set<String> = []
            for offset in 0..<count {
                switch statement.sources.isEmpty ? .position(offset + 1) : statement.sources[offset] {
                case let .position(index):
                    positions = max(positions, index)
                    guard index <= positional.count else {
                        throw PlaceholderMismatch.missing(placeholder: statement.sources.isEmpty ? "$\(index)" : "?\(index)", sql: sql)
                    }
                    parameters.append(try parameter(positional[index - 1], name: label(statement, offset), sql: sql))
                case let .name(name):
                    names.insert(name)
                    guard let value = named[name] else { throw PlaceholderMismatch.missing(placeholder: ":" + name, sql: sql) }
                    parameters.append(try parameter(value, name: ":" + name, sql: sql))
                }
            }
            if positional.count > positions {
                throw PlaceholderMismatch.tablePositions(placeholders: positions, given: positional.count, hint: hint, sql: sql)
            }
            let unused = named.keys.filter { !names.contains($0) }.sorted()
            if !unused.isEmpty { throw PlaceholderMismatch.unusedNames(unused, sql: sql) }
            return parameters
        }
    }

    /// `?2`, `:name` or `$2`: the placeholder of the value at `offset`, as
    /// the statement was written.
    private static func label(_ statement: PostgresPlaceholders, _ offset: Int) -> String {
        guard offset < statement.sources.count else { return "$\(offset + 1)" }
        switch statement.sources[offset] {
        case let .position(index): return "?\(index)"
        case let .name(name): return ":" + name
        }
    }

    /// The value as the wire sends it; text with a NUL byte refused.
    static func parameter(_ value: StoreValue, name: String, sql: String) throws -> PostgresValue {
        if case let .text(text) = value, let reason = SQLDialect.postgresql.refusal(ofText: text) {
            throw PostgresStoreError.statement("value \(name) \(reason); pass bytes as db.blob(s) (bytea): \(TextBytes.visibleSQL(sql))")
        }
        return PostgresDatabase.parameter(value)
    }
}
