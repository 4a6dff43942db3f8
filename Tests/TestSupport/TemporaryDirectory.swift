import Foundation

/// A temporary folder removed with the value.
public final class TemporaryDirectory: @unchecked Sendable {
    public let path: String

    public init() {
        let template = NSTemporaryDirectory() + "opsh-tests-XXXXXX"
        var bytes = Array(template.utf8CString)
        path = bytes.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
    }

    public func file(_ name: String) -> String { path + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
