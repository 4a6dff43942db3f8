/// Why an export or an import was refused. Nothing was written in either case.
public enum TransferError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The document is not one opsh can import: bad JSON, another format
    /// or version, a missing or mistyped field, a row whose parent is not
    /// in the document.
    case document(String)
    /// Rows of the document already exist and `replace` was not asked for.
    case conflict(String)
    /// The data cannot be exported (a BLOB where text was expected, …).
    case unexportable(String)

    public var description: String {
        switch self {
        case let .document(message), let .conflict(message), let .unexportable(message): return message
        }
    }
}
