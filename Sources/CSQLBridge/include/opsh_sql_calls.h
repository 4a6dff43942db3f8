// SQLite's C API as the `db` module's Swift slow path calls it (binding
// tables of parameters, db.NULL and db.blob, the first run of a statement,
// db.rows cursors): one small function per SQLite call, so that Swift
// reaches SQLite through this module and never imports SQLite's own
// module (GRDBSQLite) above Store (ARCHITECTURE.md, "The engine seam").
// The fast path (opsh_sql.c) calls SQLite directly.
#pragma once
#include <stdint.h>
#include "opsh_lua.h"

// SQLite's handles, declared as sqlite3.h does (that header is GRDB's
// module in Swift; including it here too would make its functions
// ambiguous there).
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

/// SQLite's result codes the slow path tells apart (checked against
/// sqlite3.h's in opsh_sql_calls.c).
#define OPSH_SQLITE_OK 0
#define OPSH_SQLITE_ROW 100
#define OPSH_SQLITE_DONE 101

int opsh_sqlite_step(sqlite3_stmt *statement);
/// sqlite3_reset, then sqlite3_clear_bindings: bound strings may point
/// into the Lua stack, so they are dropped with the reset.
void opsh_sqlite_reset_and_clear(sqlite3_stmt *statement);
void opsh_sqlite_finalize(sqlite3_stmt *statement);
/// sqlite3_total_changes64: rows written on the connection so far, counted
/// when a statement ends and not rolled back (a FAIL keeps its rows).
long long opsh_sqlite_total_changes(sqlite3 *connection);
/// Whether `connection` is outside a transaction (sqlite3_get_autocommit).
int opsh_sqlite_autocommit(sqlite3 *connection);
/// sqlite3_stmt_readonly: nonzero when the statement changes nothing.
int opsh_sqlite_readonly(sqlite3_stmt *statement);
const char *opsh_sqlite_sql(sqlite3_stmt *statement);
int opsh_sqlite_column_count(sqlite3_stmt *statement);
/// How often SQLite prepared the statement again, in a step, after the
/// schema changed (SQLITE_STMTSTATUS_REPREPARE): its columns may have.
int opsh_sqlite_reprepares(sqlite3_stmt *statement);
const char *opsh_sqlite_column_name(sqlite3_stmt *statement, int column);

int opsh_sqlite_parameter_count(sqlite3_stmt *statement);
/// `:name`, `@name`, `$name` or `?NNN`; NULL for a plain `?`.
const char *opsh_sqlite_parameter_name(sqlite3_stmt *statement, int position);
int opsh_sqlite_parameter_index(sqlite3_stmt *statement, const char *name);
int opsh_sqlite_bind_null(sqlite3_stmt *statement, int position);
/// Binds `length` bytes as a BLOB; SQLite copies them (SQLITE_TRANSIENT).
int opsh_sqlite_bind_blob_copy(sqlite3_stmt *statement, int position, const void *bytes, int length);

const char *opsh_sqlite_errmsg(sqlite3 *connection);
const char *opsh_sqlite_errstr(int code);

/// Pushes what `db.exec` returns: the rows the connection's last statement
/// changed (sqlite3_changes64) and its last inserted rowid.
void opsh_sql_push_changes(lua_State *L, sqlite3 *connection);

/// Reads `PRAGMA schema_version` on `connection` into `*version`, with the
/// statement `*statement` (prepared on first use and kept there; the
/// caller finalizes it). Returns 0 when it cannot be read.
int opsh_sql_schema_version(sqlite3 *connection, sqlite3_stmt **statement, int64_t *version);
