/// The Lua API as `opsh man` lists it: the same entries `help()` shows
/// (``HelpEntries``), every one whether or not this build has it, by
/// module in `help()`'s order.
public enum HelpReference {
    public struct Function: Sendable {
        /// How to call it: `db.query(sql, ...) → rows`.
        public let signature: String
        /// One line: what it does.
        public let summary: String
    }

    public struct Module: Sendable {
        /// "" for the global functions.
        public let name: String
        public let summary: String
        public let functions: [Function]
    }

    public static var modules: [Module] {
        let listed = HelpEntries.modules.map(\.name)
        let others = HelpEntries.all.map(\.module).filter { !listed.contains($0) }
        var unlisted: [String] = []
        for name in others where !unlisted.contains(name) { unlisted.append(name) }
        return (HelpEntries.modules + unlisted.map { ($0, "") }).compactMap { module in
            let functions = HelpEntries.all.filter { $0.module == module.name }
                .map { Function(signature: $0.signature, summary: $0.summary) }
            return functions.isEmpty ? nil : Module(name: module.name, summary: module.summary, functions: functions)
        }
    }
}
