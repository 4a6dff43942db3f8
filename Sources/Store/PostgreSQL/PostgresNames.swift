/// How rows from PostgreSQL are keyed: by the schema's own spelling.
///
/// opsh's schema writes its identifiers unquoted on both engines, so
/// PostgreSQL stores `bundleIdentifier` as `bundleidentifier` and returns
/// that as the column's name. Scripts, repositories and exports key rows
/// by the spelling SQLite keeps (`row.bundleIdentifier`), so a result
/// column whose name is the folded form of one of the schema's mixed-case
/// names is given that name back. Other names are left as the server
/// returns them: an alias written unquoted folds to lower case on
/// PostgreSQL (write `AS "buildCount"` to keep its case on both engines).
public enum PostgresNames {
    /// The schema's identifiers that have capital letters: the tables and
    /// columns the built-in migrations make (``StoreMigrations``).
    public static let mixedCase: [String] = {
        var seen = Set<String>()
        return StoreMigrations.builtIn.flatMap(\.tableAndColumnNames).filter { name in
            name != name.lowercased() && seen.insert(name).inserted
        }
    }()

    static let byFoldedName: [String: String] = Dictionary(
        uniqueKeysWithValues: mixedCase.map { ($0.lowercased(), $0) })

    /// The name a row is keyed by for a column the server named `name`.
    public static func rowKey(_ name: String) -> String {
        byFoldedName[name] ?? name
    }
}
