import GRDBSQLite

/// The versions of the libraries opsh's storage is linked with, as
/// `opsh --version` says them.
public enum StoreVersions {
    /// The SQLite library in use ("3.40.1").
    public static var sqlite: String { String(cString: sqlite3_libversion()) }
}
