// swift-tools-version:6.1
// opsh — the operator shell. Layers (imports only point down):
//
//   opsh          executable: argument parsing, modes, exit codes
//   Shell         readline REPL
//   Bindings      Lua modules over the core
//   LuaRuntime    generic Swift ⇄ Lua bridge
//   Store | Git | Jobs   the Swift core
//   TextCodec     JSON and terminal text widths (under Store, Bindings, Shell)
//   PostgresWire  PostgreSQL's wire protocol, synchronous; TLS and digests from OpenSSL
//   CLua, CLuaShim, CReadline   system libraries and the C shim
//   CSQLBridge    the db module's hot path in C (under Bindings)
//   CSpawn        GNU extensions for child processes (under Git)
//   COpenSSL      OpenSSL's TLS client and digests behind a few C calls (under PostgresWire)
import PackageDescription

// Every Swift target of opsh's own, in a release build: the metadata of a
// generic type the code names (a `[String: T]`) comes from its accessor,
// called with the witness tables it needs, instead of being decoded from
// its mangled name at first use; decoding checks each conformance the
// type requires, and in the static executable the runtime finds one by
// scanning every conformance record (ARCHITECTURE.md, "Start-up").
let startUp: [SwiftSetting] = [
    .unsafeFlags(["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"], .when(configuration: .release)),
]

let package = Package(
    name: "opsh",
    products: [
        .executable(name: "opsh", targets: ["opsh"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
    ],
    targets: [
        // MARK: C libraries from Debian
        // Headers are found under /usr/include (<lua5.4/lua.h>,
        // <readline/readline.h>) rather than through pkg-config: the
        // lua5.4 and readline .pc files add -D flags that SwiftPM refuses
        // with a warning on every build.
        .systemLibrary(
            name: "CLua",
            providers: [.apt(["liblua5.4-dev"])]),
        .target(
            name: "CLuaShim",
            dependencies: ["CLua"],
            linkerSettings: [.linkedLibrary("lua5.4")]),
        // SQLite-specific pieces Store owns, in C: the read connection's
        // shared snapshot and its watchdog, changesets (session extension).
        .target(
            name: "CSQLiteStore",
            linkerSettings: [.linkedLibrary("sqlite3")]),
        // The hot path of the `db` module (bind, step, rows to tables).
        .target(
            name: "CSQLBridge",
            dependencies: ["CLuaShim", "CSQLiteStore"],
            linkerSettings: [.linkedLibrary("sqlite3")]),
        .systemLibrary(
            name: "CReadline",
            providers: [.apt(["libreadline-dev"])]),

        // MARK: The Swift core
        // JSON (one parser, one value type, one string escaper) and the
        // display width of text: no GRDB, no Lua.
        .target(
            name: "TextCodec",
            swiftSettings: startUp),
        .target(
            name: "Store",
            dependencies: [
                "TextCodec", "CSQLiteStore", "PostgresWire",
                .product(name: "GRDB", package: "GRDB.swift"),
                // The raw C API, for the few hot loops (batched inserts).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ],
            swiftSettings: startUp),

        // OpenSSL (Debian's libssl-dev, static libraries included for
        // scripts/build-release): the TLS session of PostgreSQL connections
        // and every digest opsh computes (SHA-256, HMAC, PBKDF2, MD5), so
        // that opsh has no cryptography of its own. C, because much of
        // OpenSSL's API is macros Swift cannot call.
        .target(
            name: "COpenSSL",
            linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),

        // PostgreSQL's frontend/backend protocol v3, synchronous, over a
        // blocking socket or TLS: nothing but OpenSSL (ARCHITECTURE.md,
        // "PostgreSQL: names, types, the client library").
        .target(
            name: "PostgresWire",
            dependencies: ["COpenSSL"],
            swiftSettings: startUp),

        // GNU spawn/pipe extensions Swift's Glibc module does not import.
        .target(
            name: "CSpawn"),
        .target(
            name: "Git",
            dependencies: ["CSpawn", "TextCodec"],
            swiftSettings: startUp),
        .target(
            name: "Jobs",
            dependencies: [
                // The database only through Store's BuildStore (SQLite or PostgreSQL).
                "Store", "Git",
                // The workspaces' records.
                "TextCodec",
            ],
            swiftSettings: startUp),

        // MARK: Lua
        .target(
            name: "LuaRuntime",
            // TextCodec: what a Lua string that is not UTF-8 is refused with.
            dependencies: ["CLuaShim", "TextCodec"],
            swiftSettings: startUp),

        .target(
            name: "Bindings",
            dependencies: [
                // The engines only through Store's session (no GRDB, no
                // PostgresWire); SQLite's C API through CSQLBridge.
                "LuaRuntime", "CLuaShim", "CSQLBridge", "Store", "Jobs", "Git", "TextCodec",
            ],
            swiftSettings: startUp),

        // MARK: The shell
        .target(
            name: "Shell",
            dependencies: ["Bindings", "LuaRuntime", "CLuaShim", "Store", "CReadline", "TextCodec"],
            swiftSettings: startUp),

        // MARK: The program
        .executableTarget(
            name: "opsh",
            dependencies: [
                "Shell", "Bindings", "LuaRuntime", "Store", "Jobs", "TextCodec",
            ],
            swiftSettings: startUp),

        // MARK: Benchmarks (scripts/bench)
        .executableTarget(
            name: "opsh-bench",
            dependencies: ["Store", "Bindings", "LuaRuntime", "Jobs", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: startUp),

        // MARK: Tests
        // What every test target shares: temporary folders, child processes
        // through posix_spawn, the sqlite3 CLI, `sh`, polling, seeded
        // generators, the opsh test folder and the pseudo-terminal.
        .target(name: "TestSupport", dependencies: ["CSpawn"], path: "Tests/TestSupport"),
        .testTarget(name: "TextCodecTests", dependencies: ["TextCodec", "TestSupport"]),
        .testTarget(name: "PostgresWireTests", dependencies: ["PostgresWire", "TestSupport"]),
        .testTarget(name: "StoreTests", dependencies: ["Store", "TextCodec", "TestSupport"]),
        .testTarget(name: "LuaRuntimeTests", dependencies: ["LuaRuntime", "TestSupport"]),
        .testTarget(name: "GitTests", dependencies: ["Git", "TestSupport"]),
        .testTarget(name: "JobsTests", dependencies: ["Jobs", "Store", "Git", "TestSupport", .product(name: "GRDB", package: "GRDB.swift")]),
        .testTarget(name: "BindingsTests", dependencies: ["Bindings", "Store", "PostgresWire", "LuaRuntime", "Git", "TestSupport"]),
        .testTarget(name: "ShellTests", dependencies: ["Shell", "Bindings", "LuaRuntime", "CLuaShim", "Store", "TextCodec", "TestSupport"]),
        // Runs the built `opsh` (batch modes, and the shell through a pty).
        .testTarget(name: "OpshTests", dependencies: ["opsh", "TestSupport"]),
        // Faults, bad input, fuzzing and security; runs the built `opsh` too.
        .testTarget(name: "ReliabilityTests", dependencies: ["opsh", "Store", "LuaRuntime", "Git", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
