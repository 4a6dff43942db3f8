#if canImport(Glibc)
import Glibc
#endif

/// Reads a whole file with the C library, keeping errno's reason.
enum FileBytes {
    static func read(_ path: String) -> [UInt8]? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count > 0 { bytes.append(contentsOf: chunk[0..<count]) }
            if count < chunk.count {
                if ferror(file) != 0 { return nil }
                break
            }
        }
        return bytes
    }

    static func lastError() -> String {
        String(cString: strerror(errno))
    }
}
