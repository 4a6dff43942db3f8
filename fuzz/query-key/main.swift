import Foundation

// libFuzzer target: the query-key parser (Sources/Store/QueryKeys).
// Any text may be refused with an error, never crash or hang; a key that
// parses must print back to text that parses to the same key.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzQueryKey(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let key = try? QueryKeyParser.parse(text) else { return 0 }
    let printed = QueryKeyPrinter.print(key)
    guard let again = try? QueryKeyParser.parse(printed), again == key else {
        fatalError("round trip broken: \(text.debugDescription) parsed, printed as \(printed.debugDescription), which does not parse back")
    }
    return 0
}
