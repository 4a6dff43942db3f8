import Testing
@testable import Store

/// SQLite's placeholders become PostgreSQL's `$n` outside strings,
/// identifiers, dollar quotes and comments; casts and jsonb's operators stay.
@Suite struct PostgresPlaceholdersTests {
    static let rewritten: [(String, String, [PostgresPlaceholders.Source])] = [
        ("SELECT * FROM builds WHERE id = ?", "SELECT * FROM builds WHERE id = $1", [.position(1)]),
        ("UPDATE t SET a = ?, b = ? WHERE c = ?", "UPDATE t SET a = $1, b = $2 WHERE c = $3",
         [.position(1), .position(2), .position(3)]),
        // SQLite's numbering: ?NNN, and ? after it is one more than the largest.
        ("SELECT ?2, ?1, ?", "SELECT $2, $1, $3", [.position(1), .position(2), .position(3)]),
        // Names: the same name is the same placeholder.
        ("SELECT * FROM p WHERE a = :id OR b = :id AND c = :other_1", "SELECT * FROM p WHERE a = $1 OR b = $1 AND c = $2",
         [.name("id"), .name("other_1")]),
        ("SELECT ?, :a, ?", "SELECT $1, $2, $3", [.position(1), .name("a"), .position(3)]),
        // Nothing inside strings, E'' escapes, identifiers, dollar quotes, comments.
        ("SELECT '?', 'it''s :x ?', ?", "SELECT '?', 'it''s :x ?', $1", [.position(1)]),
        (#"SELECT 'a\', ?"#, #"SELECT 'a\', $1"#, [.position(1)]),
        (#"SELECT E'a\'?', ?"#, #"SELECT E'a\'?', $1"#, [.position(1)]),
        (#"SELECT e'\\', ?"#, #"SELECT e'\\', $1"#, [.position(1)]),
        ("SELECT \"we?ird\"\"col:x\" FROM t WHERE x = ?", "SELECT \"we?ird\"\"col:x\" FROM t WHERE x = $1", [.position(1)]),
        ("SELECT $$ ? :x $$, $fn$ it's ? $$ :y $fn$, ?", "SELECT $$ ? :x $$, $fn$ it's ? $$ :y $fn$, $1", [.position(1)]),
        ("SELECT 1 -- what ? :x\n, ?", "SELECT 1 -- what ? :x\n, $1", [.position(1)]),
        ("SELECT /* a /* nested ? */ still :x */ ?", "SELECT /* a /* nested ? */ still :x */ $1", [.position(1)]),
        // Casts, slices and operators stay.
        ("SELECT ?::int, x::text FROM t", "SELECT $1::int, x::text FROM t", [.position(1)]),
        ("SELECT a[1:2] FROM t WHERE b = :b", "SELECT a[1:2] FROM t WHERE b = $1", [.name("b")]),
        ("SELECT * FROM t WHERE doc ?| array['a'] AND doc ?& ? AND doc ?? 'k'",
         "SELECT * FROM t WHERE doc ?| array['a'] AND doc ?& $1 AND doc ? 'k'", [.position(1)]),
        ("SELECT a$b, ?", "SELECT a$b, $1", [.position(1)]),
        ("SELECT U&'d\\0061t?', ?", "SELECT U&'d\\0061t?', $1", [.position(1)]),
        // Multi-byte text passes through.
        ("SELECT 'é ?', ? AS ünï", "SELECT 'é ?', $1 AS ünï", [.position(1)]),
        // Unclosed: the rest is left for the server to refuse.
        ("SELECT ?, 'open ?", "SELECT $1, 'open ?", [.position(1)]),
        // Found by fuzz/pg-statements: a placeholder right after a word is
        // kept apart from it (LIMIT$1 is one identifier to the server)...
        ("SELECT * FROM t LIMIT?", "SELECT * FROM t LIMIT $1", [.position(1)]),
        ("SELECT * FROM t LIMIT:n OFFSET?2", "SELECT * FROM t LIMIT $1 OFFSET $2", [.name("n"), .position(2)]),
        // ...a `--` comment ends at a carriage return, as the server's does...
        ("SELECT 1 -- c\r, ?", "SELECT 1 -- c\r, $1", [.position(1)]),
        // ...and an E'' string continued after a newline keeps its escapes.
        ("SELECT E'a'\n'\\'?', ?", "SELECT E'a'\n'\\'?', $1", [.position(1)]),
    ]

    @Test(arguments: rewritten)
    func rewritesOutsideLiteralsAndComments(_ sql: String, _ expected: String, _ sources: [PostgresPlaceholders.Source]) throws {
        let result = try PostgresPlaceholders(rewriting: sql)
        #expect(result.sql == expected)
        #expect(result.sources == sources)
    }

    /// A script splits at `;` outside literals, identifiers, dollar
    /// quotes and comments; pieces of only space and comments go.
    @Test func scriptsSplitWhereTheServerWould() {
        #expect(PostgresPlaceholders.statements(in: "SELECT 1") == ["SELECT 1"])
        #expect(PostgresPlaceholders.statements(in: "SELECT 1; SELECT 2;") == ["SELECT 1", "SELECT 2"])
        #expect(PostgresPlaceholders.statements(in: "SELECT ';', \";\"; SELECT $$;$$, $f$;$f$") == ["SELECT ';', \";\"", "SELECT $$;$$, $f$;$f$"])
        #expect(PostgresPlaceholders.statements(in: "SELECT 1 -- a; b\n; /* c; /* d; */ */ ;\n  ; SELECT E'\\';'")
                == ["SELECT 1 -- a; b", "SELECT E'\\';'"])
        #expect(PostgresPlaceholders.statements(in: " ; -- nothing\n").isEmpty)
        // Placeholders do not matter to the split, mixed or not.
        #expect(PostgresPlaceholders.statements(in: "SELECT ?; SELECT $1") == ["SELECT ?", "SELECT $1"])
    }

    /// Found by fuzz/pg-statements: each piece was one statement by the
    /// scanner's reading but several by the server's.
    @Test func scriptsSplitAsTheServerReadsThem() {
        // `--` ends at `\r` too: the COMMIT after it is a statement.
        #expect(PostgresPlaceholders.statements(in: "SELECT 1 -- c\r; COMMIT") == ["SELECT 1 -- c", "COMMIT"])
        // An E'' string continued after a newline: `\'` is a quote in it.
        #expect(PostgresPlaceholders.statements(in: "SELECT E'x'\n'\\';'; SELECT 2") == ["SELECT E'x'\n'\\';'", "SELECT 2"])
        // A placeholder out of range does not stop the split.
        #expect(PostgresPlaceholders.statements(in: "SELECT ?0; COMMIT") == ["SELECT ?0", "COMMIT"])
        #expect(PostgresPlaceholders.statements(in: "SELECT $0; COMMIT") == ["SELECT $0", "COMMIT"])
        // A no-break space is part of a word, kept: without it the piece
        // read E'\'' ; COMMIT ; --' (three statements), not a word and a string.
        #expect(PostgresPlaceholders.statements(in: "SELECT 1; \u{A0}E'\\'';COMMIT;--'")
                == ["SELECT 1", "\u{A0}E'\\'';COMMIT;--'"])
    }

    @Test func postgresOwnPlaceholdersStayAndCannotBeMixed() throws {
        let native = try PostgresPlaceholders(rewriting: "SELECT $1, $2 FROM t")
        #expect(native.sql == "SELECT $1, $2 FROM t")
        #expect(native.sources.isEmpty)
        // How many values they take: the largest $n (so a value too many
        // or too few is refused, not ignored), and none without any.
        #expect(try PostgresPlaceholders(rewriting: "SELECT $3, $1").placeholderCount == 3)
        #expect(try PostgresPlaceholders(rewriting: "SELECT 1").placeholderCount == 0)
        #expect(try PostgresPlaceholders(rewriting: "SELECT ?, :a, ?").placeholderCount == 3)
        #expect(throws: PostgresPlaceholders.Failure.badNumber("$0", sql: "SELECT $0")) {
            try PostgresPlaceholders(rewriting: "SELECT $0")
        }
        #expect(throws: PostgresPlaceholders.Failure.badNumber("$70000", sql: "SELECT $70000")) {
            try PostgresPlaceholders(rewriting: "SELECT $70000")
        }
        #expect(throws: PostgresPlaceholders.Failure.mixed(sql: "SELECT $1, ?")) {
            try PostgresPlaceholders(rewriting: "SELECT $1, ?")
        }
        // Inside a string a `$1` is text, so `?` is fine beside it.
        #expect(try PostgresPlaceholders(rewriting: "SELECT '$1', ?").sql == "SELECT '$1', $1")
    }

    @Test func numbersOutOfRangeAreRefusedWithTheStatement() {
        #expect(throws: PostgresPlaceholders.Failure.badNumber("?0", sql: "SELECT ?0")) {
            try PostgresPlaceholders(rewriting: "SELECT ?0")
        }
        #expect(throws: PostgresPlaceholders.Failure.badNumber("?70000", sql: "SELECT ?70000")) {
            try PostgresPlaceholders(rewriting: "SELECT ?70000")
        }
        #expect("\(PostgresPlaceholders.Failure.badNumber("?0", sql: "SELECT ?0"))" == "placeholder ?0 is out of range (1…65535): SELECT ?0")
    }

    /// Text without placeholders comes back byte for byte, whatever it
    /// holds: random mixes of the lexical pieces above.
    @Test func textWithoutPlaceholdersIsUnchanged() throws {
        let pieces = ["SELECT", " ", "'a''b'", "\"c\"\"d\"", "$$x$$", "$t$ y $t$", "-- c\n", "/* /* n */ */", "x::int",
                      "a[1:2]", "doc ?| k", "doc ?& k", "é", "E'\\''", "1", "(", ")", ",", "\n"]
        var generator = SeededGenerator(seed: 7)
        for _ in 0..<2000 {
            let count = Int.random(in: 1...12, using: &generator)
            let sql = (0..<count).map { _ in pieces.randomElement(using: &generator)! }.joined(separator: " ")
            let result = try PostgresPlaceholders(rewriting: sql)
            #expect(result.sql == sql)
            #expect(result.sources.isEmpty)
        }
    }
    /// opsh's own statements name opsh's tables and functions in their
    /// schema (PostgresHomeSchema): where a table is named, and a
    /// function before its `(`; never a column's table (`builds.id`), a
    /// column of the same name as a table (opsh_runners' `schemes`), nor
    /// inside a literal, a comment or a dollar quote.
    @Test func opshsOwnStatementsNameOpshsTablesInTheirSchema() throws {
        let qualifier = PostgresPlaceholders.Qualifier(schema: "\"my home\"", tables: ["builds", "buildLogs", "schemes", "opsh_runners"],
                                                       functions: ["opsh_json_valid"])
        let cases: [(String, String)] = [
            ("SELECT builds.id, b.x FROM builds JOIN schemes s ON s.id = builds.schemeId WHERE id = ?",
             "SELECT builds.id, b.x FROM \"my home\".builds JOIN \"my home\".schemes s ON s.id = builds.schemeId WHERE id = $1"),
            ("INSERT INTO opsh_runners (id, schemes) VALUES (?, ?)", "INSERT INTO \"my home\".opsh_runners (id, schemes) VALUES ($1, $2)"),
            ("UPDATE opsh_runners SET schemes = ? WHERE id = ?", "UPDATE \"my home\".opsh_runners SET schemes = $1 WHERE id = $2"),
            ("DELETE FROM \"buildlogs\" WHERE buildId IN (SELECT id FROM builds)",
             "DELETE FROM \"my home\".\"buildlogs\" WHERE buildId IN (SELECT id FROM \"my home\".builds)"),
            ("SELECT count(*) FROM buildLogs -- FROM builds\n WHERE x = 'FROM builds'",
             "SELECT count(*) FROM \"my home\".buildLogs -- FROM builds\n WHERE x = 'FROM builds'"),
            ("SELECT opsh_json_valid(?), other.opsh_json_valid(1), $$ FROM builds $$",
             "SELECT \"my home\".opsh_json_valid($1), other.opsh_json_valid(1), $$ FROM builds $$"),
            ("CREATE TABLE IF NOT EXISTS builds (id text REFERENCES schemes(id))",
             "CREATE TABLE IF NOT EXISTS \"my home\".builds (id text REFERENCES \"my home\".schemes(id))"),
            ("SELECT * FROM public.builds, projects", "SELECT * FROM public.builds, projects"),
        ]
        for (sql, expected) in cases {
            #expect(try PostgresPlaceholders(rewriting: sql, qualifying: qualifier).sql == expected)
            // A script's statement is run as written.
            #expect(try PostgresPlaceholders(rewriting: sql).sql.contains("my home") == false)
        }
    }
}
