/// libpq's connection services: `service=NAME` (or `PGSERVICE=NAME`) takes
/// the settings of section `[NAME]` of the first service file that has it,
///
///     # ~/.pg_service.conf
///     [builds]
///     host=db.example
///     port=6432
///     dbname=builds
///
/// looking in `PGSERVICEFILE` (else `~/.pg_service.conf`), then in
/// `PGSYSCONFDIR/pg_service.conf` (`PGSYSCONFDIR` is `/etc/postgresql-common`
/// in Debian's libpq). Lines are `KEYWORD=VALUE` taken as written (no
/// quotes), blanks at either end of a line ignored, `#` starts a comment.
/// A service no file defines is an error, as in libpq.
enum ServiceFile {
    /// Debian's libpq's `PGSYSCONFDIR` when the variable is unset.
    static let defaultSystemFolder = "/etc/postgresql-common"

    static func settings(ofService service: ConnectionSetting, environment: ConnectionEnvironment) throws -> [ConnectionSetting] {
        var looked: [String] = []
        if let userFile = environment["PGSERVICEFILE"] ?? environment.home.map({ $0 + "/.pg_service.conf" }) {
            looked.append(userFile)
            if let settings = try section(service.value, of: userFile) { return settings }
        }
        let systemFile = (environment["PGSYSCONFDIR"] ?? defaultSystemFolder) + "/pg_service.conf"
        looked.append(systemFile)
        if let settings = try section(service.value, of: systemFile) { return settings }
        throw service.failure("service “\(KeywordValueString.visible(service.value))” is not defined in \(looked.joined(separator: " nor "))")
    }

    /// The settings of `[name]` in the file at `path`; nil when the file is
    /// missing or has no such section.
    static func section(_ name: String, of path: String) throws -> [ConnectionSetting]? {
        guard let file = SmallFile.read(path), file.isRegularFile else { return nil }
        var inSection = false
        var settings: [ConnectionSetting] = []
        for (index, bytes) in file.lines.enumerated() {
            let line = String(decoding: bytes, as: UTF8.self).trimmingBlanks
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                if inSection { break }
                inSection = line.hasSuffix("]") && line.dropFirst().dropLast() == name[...]
                continue
            }
            guard inSection else { continue }
            let source = ConnectionSetting.Source.serviceFile(path: path, line: index + 1)
            guard let equals = line.firstIndex(of: "=") else {
                throw ConnectionSetting("", "", from: source).failure("a line of service “\(name)” is not KEYWORD=VALUE")
            }
            let keyword = String(line[..<equals])
            if keyword == "service" {
                throw ConnectionSetting(keyword, "", from: source).failure("a service cannot name another service")
            }
            settings.append(ConnectionSetting(keyword, String(line[line.index(after: equals)...]), from: source))
        }
        return inSection || !settings.isEmpty ? settings : nil
    }
}

extension String {
    /// Without blanks (spaces, tabs, line ends) at either end.
    var trimmingBlanks: String {
        String(drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }
}
