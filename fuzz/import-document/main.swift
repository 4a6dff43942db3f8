import Foundation

// libFuzzer target: the reader of import documents
// (Sources/TextCodec: JSON.parse and JSON.text). Any text may be refused,
// never crash or hang; a document that reads must write back to text
// that reads to the same document.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzImportDocument(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let document = try? JSON.parse(text) else { return 0 }
    guard let again = try? JSON.parse(document.text()), again == document else {
        fatalError("round trip broken for \(text.prefix(200).debugDescription)")
    }
    return 0
}
