/// What a dry run's operations counted instead of changing, over the whole
/// dry run (the shell's, chunk after chunk): `telemetry.cleanup` counts the
/// rows it would delete without deleting them (deleting them in the dry
/// run's transaction would hold the write lock throughout). A real session's
/// second cleanup finds those rows gone, so a dry run's later cleanup leaves
/// out the rows an earlier one counted (by the filters they were counted
/// by), and the dry run's summary names each row once.
struct CountedInsteadOfChanged {
    /// The rows counted, by table, as deletions.
    private(set) var tables: TableChanges = [:]
    /// The filters telemetry rows were counted by, oldest first.
    private(set) var telemetryFilters: [TelemetryCleanup.Filter] = []

    mutating func add(_ table: String, deleted: Int, countedBy filter: TelemetryCleanup.Filter?) {
        guard deleted > 0 else { return }
        tables.add([table: TableChangeCounts(deleted: deleted)])
        if let filter, table == "telemetry" { telemetryFilters.append(filter) }
    }
}
