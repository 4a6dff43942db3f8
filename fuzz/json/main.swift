import Foundation

// libFuzzer target: the JSON reader behind json.decode
// (Sources/TextCodec/JSONParser.swift). Any bytes may be refused,
// never crash or hang.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    _ = try? JSONParser.parse(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
