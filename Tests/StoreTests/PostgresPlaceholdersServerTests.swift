import Testing
@testable import Store

/// The rewritten statements on a real PostgreSQL server: it sees exactly
/// the placeholders the rewriter made, and what the rewriter left alone
/// (strings, dollar quotes, comments, identifiers, operators) is still what
/// it was.
@Suite struct PostgresPlaceholdersServerTests {
    let server: PostgresServer

    init() throws {
        server = try Self.prepared.get()
    }

    /// The table the statements read, made once per test process: the
    /// cases run in parallel, and two CREATE SCHEMA IF NOT EXISTS at once
    /// collide in PostgreSQL's catalog.
    static let prepared = Result<PostgresServer, any Error> {
        let server = try PostgresServer.shared()
        try server.sql("""
            DROP SCHEMA IF EXISTS placeholders CASCADE;
            CREATE SCHEMA placeholders;
            CREATE TABLE placeholders.t (id int, a text, doc jsonb, arr int[]);
            INSERT INTO placeholders.t VALUES (1, 'x', '{"a": 1, "k": 2}', '{10,20,30}');
            """)
        return server
    }

    /// SQLite-style statement, the values to run it with, and what the
    /// server returns (psql's unaligned output).
    static let statements: [(String, [String], String)] = [
        ("SELECT '?' AS q, ?::text AS v", ["'x'"], "?|x"),
        ("SELECT 'it''s :x ?', :name::text", ["'n'"], "it's :x ?|n"),
        (#"SELECT E'a\'?', ?::text"#, ["'v'"], "a'?|v"),
        ("SELECT $$ ? :x $$, $fn$ it's ? $fn$, ?::text", ["'v'"], " ? :x | it's ? |v"),
        ("SELECT 1 -- what ? :x\n + ?::int", ["2"], "3"),
        ("SELECT /* a /* nested ? */ still :x */ ?::int", ["7"], "7"),
        ("SELECT doc ?| array['a'], doc ?& array['a', 'z'], doc ?? 'k' FROM t WHERE id = ?", ["1"], "t|f|t"),
        ("SELECT ?2::int - ?1::int", ["1", "5"], "4"),
        ("SELECT :a::int + :b::int * :a::int", ["2", "3"], "8"),
        ("SELECT arr[1:2] FROM t WHERE a = :a", ["'x'"], "{10,20}"),
        (#"SELECT "we?ird" FROM (SELECT 1 AS "we?ird") s WHERE ?::int = 1"#, ["1"], "1"),
        (#"SELECT U&'d\0061t?', ?::text"#, ["'v'"], "dat?|v"),
        ("SELECT x::text FROM (SELECT ?::int AS x) s", ["5"], "5"),
    ]

    @Test(arguments: statements)
    func theServerSeesThePlaceholdersTheRewriterMade(_ sql: String, _ values: [String], _ expected: String) throws {
        let rewritten = try PostgresPlaceholders(rewriting: sql)
        #expect(rewritten.sources.count == values.count)
        let found = try server.sql("""
            SET search_path = placeholders;
            PREPARE p AS \(rewritten.sql);
            SELECT cardinality(parameter_types) FROM pg_prepared_statements WHERE name = 'p';
            EXECUTE p(\(values.joined(separator: ", ")));
            """)
        #expect(found == "\(values.count)\n\(expected)", "\(rewritten.sql)")
    }

    /// The control: the same statements as written, with `?`, are not
    /// PostgreSQL's (what the rewriter is for).
    @Test func withoutTheRewriteTheServerRefusesThem() throws {
        let positional = #expect(throws: ShellError.self) {
            try server.sql("SET search_path = placeholders; PREPARE q AS SELECT a FROM t WHERE id = ?;")
        }
        #expect(positional?.output.contains(#"syntax error at or near ";""#) == true, "\(positional?.output ?? "")")
        let named = #expect(throws: ShellError.self) {
            try server.sql("SET search_path = placeholders; PREPARE q AS SELECT a FROM t WHERE a = :a;")
        }
        #expect(named?.output.contains(#"syntax error at or near ":""#) == true, "\(named?.output ?? "")")
        // Rewritten, both run.
        let rewritten = try PostgresPlaceholders(rewriting: "SELECT a FROM t WHERE id = ? AND a = :a").sql
        #expect(try server.sql("SET search_path = placeholders; PREPARE q AS \(rewritten); EXECUTE q(1, 'x');") == "x")
    }
}
