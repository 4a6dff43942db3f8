// The transaction guard: whether a prepared statement begins, ends or
// releases a transaction or savepoint, as SQLite itself compiled it.
//
// Why not the statement's words: "/* */ COMMIT", "end", "COMMIT TRANSACTION"
// and "DELETE …; COMMIT" all end a transaction, and a check of the first
// word let them through (a --dry-run kept its writes). Why not the
// authorizer: GRDB owns the writer connection's authorizer and registers it
// once per connection. SQLite compiles every such statement to one of two
// opcodes, AutoCommit (BEGIN, COMMIT, END, ROLLBACK) and Savepoint
// (SAVEPOINT, RELEASE, ROLLBACK TO), whatever the spelling, so the guard
// reads the statement's own bytecode (EXPLAIN of the statement's text on
// the same connection) and looks for them.
#pragma once

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

/// 1 when `statement` (prepared on `connection`) is transaction control,
/// 0 when it is not, -1 when SQLite could not say (the caller refuses).
///
/// Only statements without result columns are compiled again (queries
/// cost nothing extra). An EXPLAIN statement never runs what it explains
/// and is not control.
int opsh_sql_is_transaction_control(sqlite3 *connection, sqlite3_stmt *statement);

/// 1 when `statement` drops a trigger (the sandbox's own protection is
/// made of TEMP triggers), 0 when not, -1 when SQLite could not say.
int opsh_sql_drops_trigger(sqlite3 *connection, sqlite3_stmt *statement);

/// Turns on SQLITE_DBCONFIG_DEFENSIVE (no writable_schema, no edits of
/// the schema tables): the sandbox's triggers cannot be edited away.
int opsh_sql_set_defensive(sqlite3 *connection);
