import CLuaShim

/// `--memory-limit` for a host function that makes a result's rows in a
/// loop: allocations past the limit succeed while a Swift frame runs
/// (ARCHITECTURE.md, decision 1), so the loop asks after each row whether
/// the state now holds more than its limit, and stops there rather than
/// once the whole result is made (decision 9; docs/operations.md: the
/// process stays near its own size plus twice the limit).
public enum RowsMemoryLimit {
    /// Throws the limit's refusal when the state holds more than its limit
    /// after `rows` rows, having dropped the partial result above `base`.
    public static func check(_ state: OpaquePointer, base: Int32, rows: Int) throws {
        guard opsh_rows_pass_memory_limit(state, base, Int64(rows)) != 0 else { return }
        let message = LuaStack(state).string(at: -1) ?? "not enough memory"
        opsh_pop(state, 1)
        throw LuaCallError.message(message)
    }
}
