import Foundation
import LuaRuntime

/// The shell's `print`: Lua's own (each value through `tostring`, tabs
/// between, a newline after), except that one call's text taller than the
/// screen goes to the ``Pager`` (and what the chunk prints after it):
/// `help()`, which prints through the global `print`, and `print(big)`
/// page as returned values do. A row set
/// or row prints as the shell shows it returned (a table), not as
/// `opsh.rows: 0x…`.
///
/// Written in Lua around one host function so `tostring`'s errors (a
/// `__tostring` that fails) stay Lua errors, raised where `print` was
/// called.
enum PagedPrint {
    static func install(on runtime: LuaRuntime, pager: @escaping () -> Pager?, printer: @escaping () -> ValuePrinter) throws {
        runtime.register("__opsh_show_rows") { call in
            guard ["opsh.rows", "opsh.row"].contains(LuaInspection(state: call.state).metatableName(1)),
                  let text = try? printer().render(call.state, first: 1, count: 1) else { return 0 }
            call.stack.push(text)
            return 1
        }
        runtime.register("__opsh_paged_write") { call in
            let bytes = try call.bytes(1)
            if let pager = pager(), pager.keeps(String(decoding: bytes, as: UTF8.self)) { return 0 }
            // After what io.write left in C's stdout buffer, as Lua's print
            // (which flushes each line) keeps their order.
            fflush(nil)
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
                if written < 0 { if errno == EINTR { continue }; break }
                offset += written
            }
            return 0
        }
        _ = try runtime.execute("""
            local write, rows, tostring, select, type, concat = __opsh_paged_write, __opsh_show_rows, tostring, select, type, table.concat
            __opsh_paged_write, __opsh_show_rows = nil, nil
            print = function(...)
              local parts = {}
              for i = 1, select("#", ...) do
                local value = (select(i, ...))
                parts[i] = type(value) == "table" and rows(value) or tostring(value)
              end
              write(concat(parts, "\\t") .. "\\n")
            end
            """, chunkName: "=(opsh print)")
    }
}
