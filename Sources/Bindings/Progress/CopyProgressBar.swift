import Store

extension CopyRequest {
    /// The request with a progress bar on stderr for a copy from a file
    /// (`db.copy(table, FILE)`, `.import`): drawn from two seconds on, only
    /// when stderr is a terminal; `clear` erases it once the copy ended.
    public func showingProgress() -> (request: CopyRequest, clear: () -> Void) {
        guard case .csv = source else { return (self, {}) }
        let bar = ProgressBar(label: "import", unit: "bytes", delay: 2)
        guard bar.isVisible else { return (self, {}) }
        var request = self
        request.progress = CopyProgress { bytes, size in bar.update(completed: bytes, total: max(size, bytes)) }
        return (request, { bar.clear() })
    }
}
