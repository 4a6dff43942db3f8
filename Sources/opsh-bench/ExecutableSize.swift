import Foundation

/// What the shipped executable is made of: the linker's map of the static
/// release build (`scripts/build-release` links with `-Map=.build/opsh.map`
/// and ships `.build/opsh`, stripped), its loaded sections' bytes summed by the library or
/// target each input came from.
enum ExecutableSize {
    /// The parts an operator would ask about, by the input file's path.
    static let parts: [(name: String, matches: @Sendable (String) -> Bool)] = [
        ("ICU's data and code (Foundation's `_FoundationICU`)", { $0.contains("FoundationICU") }),
        ("Foundation (`FoundationEssentials`, `FoundationInternationalization`, `Foundation`)", { $0.contains("libFoundation") || $0.contains("_FoundationCollections") || $0.contains("_FoundationCShims") || $0.contains("libswiftSynchronization") }),
        ("Swift runtime and standard library (`swiftCore`, Concurrency, Dispatch)", { $0.contains("swift_static") || $0.contains("libdispatch") || $0.contains("libBlocksRuntime") }),
        ("GRDB", { $0.contains("/GRDB.build/") }),
        ("SQLite (Debian's `libsqlite3.a`)", { $0.contains("libsqlite3") }),
        ("OpenSSL (`libssl.a`, `libcrypto.a`)", { $0.contains("libssl.a") || $0.contains("libcrypto.a") }),
        ("Lua 5.4 (`liblua5.4.a`)", { $0.contains("liblua5.4") }),
        ("readline and terminfo", { $0.contains("libreadline") || $0.contains("libtinfo") || $0.contains("libncurses") }),
        ("PostgresWire (opsh's PostgreSQL client)", { $0.contains("/PostgresWire.build/") }),
        ("opsh's own code (Store, Bindings, Shell, Jobs, Git, LuaRuntime, C shims, …)", { $0.contains(".build/") && $0.contains("/release/") }),
        ("C and C++ libraries (glibc, libstdc++, libgcc, zlib)", { _ in true }),
    ]

    /// Output sections that are not loaded (not in the running process).
    static func isLoaded(_ section: String) -> Bool {
        !(section.hasPrefix(".debug") || section.hasPrefix(".comment") || section.hasPrefix(".note.GNU-stack")
          || section.hasPrefix(".gnu.warning") || section.hasPrefix(".stab") || section == "/DISCARD/")
    }

    /// Markdown lines: the stripped file's size, then the parts.
    static func table(executable: String, unstripped: String, map: String) -> [String] {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: executable),
              let fileSize = attributes[.size] as? Int else { return ["The executable \(executable) was not found."] }
        let withSymbols = (try? FileManager.default.attributesOfItem(atPath: unstripped))?[.size] as? Int
        guard let text = try? String(contentsOfFile: map, encoding: .utf8) else {
            return ["The linker's map \(map) was not found: build opsh with `./scripts/build-release opsh`."]
        }
        var sizes: [String: Int] = [:]
        var section = ""
        var pending: String?  // an input section whose name filled its line
        var inMemoryMap = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("Linker script and memory map") || line == "Memory map" { inMemoryMap = true; continue }
            guard inMemoryMap else { continue }
            if let first = line.first, first == "." || first == "/" {
                // An output section: `.text  0xADDR  0xSIZE`.
                section = String(line.split(separator: " ", maxSplits: 1).first ?? "")
                pending = nil
                continue
            }
            guard isLoaded(section) else { continue }
            let words = line.split(separator: " ", omittingEmptySubsequences: true)
            var fields = words[...]
            if line.hasPrefix(" .") || line.hasPrefix(" COMMON") {
                if words.count == 1 { pending = String(words[0]); continue }
                fields = words.dropFirst()
            } else if pending != nil, line.hasPrefix("  ") {
                pending = nil
            } else {
                continue
            }
            // ADDRESS SIZE FILE
            guard fields.count >= 3, fields[fields.startIndex].hasPrefix("0x"),
                  let size = Int(fields[fields.startIndex + 1].dropFirst(2), radix: 16), size > 0 else { continue }
            let file = fields.dropFirst(2).joined(separator: " ")
            let part = parts.first { $0.matches(file) }!.name
            sizes[part, default: 0] += size
        }
        let total = sizes.values.reduce(0, +)
        var lines = [
            "The executable as shipped (`.build/opsh`, made by `scripts/build-release`: static, stripped): **\(megabytes(fileSize))**"
                + (withSymbols.map { "; the build's own, with its symbol table (`.build/release/opsh`, for perf and crash addresses): \(megabytes($0))" } ?? "") + ".",
            "What its loaded sections are made of, from the linker's map (\(megabytes(total)) in all; the rest of the file is headers and alignment):",
            "",
            "| part | size | share |",
            "| --- | --- | --- |",
        ]
        for part in parts.map(\.name) {
            let size = sizes[part] ?? 0
            lines.append("| \(part) | \(megabytes(size)) | \(String(format: "%.1f %%", 100 * Double(size) / Double(max(total, 1)))) |")
        }
        return lines
    }

    static func megabytes(_ bytes: Int) -> String {
        String(format: "%.1f MB", Double(bytes) / 1_000_000)
    }
}
