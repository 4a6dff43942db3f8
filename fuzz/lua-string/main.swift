import Foundation
import TextCodec

// libFuzzer target: the one reader of Lua strings (Sources/LuaRuntime:
// `LuaCall.string`, `LuaStack.text`) that keys, fields and SQL text go
// through, and the text rules it shares with the engines
// (Sources/TextCodec/TextBytes.swift). Any bytes a host function gets as
// a Lua string are read whole, every byte (a NUL included), or refused
// because they are not UTF-8, naming the first byte that is not; what a
// message shows of them has no control character in it.
let runtime: LuaRuntime = {
    let runtime = try! LuaRuntime()
    runtime.register("read") { call in
        let given = try call.bytes(1)
        let valid = String(validating: given, as: UTF8.self) != nil
        do {
            let text = try call.string(1)
            guard valid, Array(text.utf8) == given else {
                fatalError("read as other text: \(given) became \(Array(text.utf8))")
            }
        } catch let error as LuaCallError {
            guard !valid, let invalid = TextBytes.firstInvalidUTF8(given) else {
                fatalError("refused valid UTF-8 \(given): \(error)")
            }
            // The bytes before the one named are UTF-8; that one starts no
            // sequence that is.
            guard String(validating: given[..<invalid.offset], as: UTF8.self) != nil,
                  String(validating: given[invalid.offset...], as: UTF8.self) == nil,
                  given[invalid.offset] == invalid.byte,
                  "\(error)".contains("(\(invalid))") else {
                fatalError("wrong byte named for \(given): \(error)")
            }
        }
        guard TextBytes.firstNUL(given) == given.firstIndex(of: 0) else { fatalError("NUL misplaced in \(given)") }
        let shown = TextBytes.visible(given, limit: Int.max)
        if let control = shown.unicodeScalars.first(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
            fatalError("\(given) shown with control character U+\(String(control.value, radix: 16))")
        }
        return 0
    }
    return runtime
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLuaString(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    _ = try! runtime.execute("read(...)", arguments: [.bytes(bytes)])
    return 0
}
