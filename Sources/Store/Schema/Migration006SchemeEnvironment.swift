/// "006_schemeEnvironment": what a scheme's builds get of their runner's
/// environment beyond the allow list (README, "Build runners";
/// ARCHITECTURE.md, "Build runners and the queue").
///
/// - `passEnvironment`: a JSON array of variable names (`["NPM_TOKEN",
///   "CC"]`). A build of the scheme gets each one the opsh that runs it
///   has, with that opsh's value; every other variable of opsh's
///   environment (a database password, the run's reason, the operator's
///   tokens) stays out. Names, not values: the database holds no secret,
///   and what a variable holds is the runner's operator's to say. The
///   column must be JSON (a CHECK); that it is an array of names is
///   checked when a build starts, which then fails saying which entry is
///   wrong.
enum Migration006SchemeEnvironment {
    static let identifier = "006_schemeEnvironment"

    static let migration = BuiltInMigration(identifier, [
        .addColumn(table: "schemes", SchemaColumn("passEnvironment", .text, notNull: true, default: "'[]'",
                                                   check: .json(named: "passEnvironment_is_json"))),
    ])
}
