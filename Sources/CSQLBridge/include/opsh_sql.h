// The hot path of opsh's `db` module, in C: statements that a script runs
// again and again (a db.exec in a loop, db.first by key, db.rows over
// millions of rows) are bound, stepped and turned into Lua values here,
// without entering Swift.
//
// Swift stays in charge: it prepares and caches statements
// (StatementCache), decides where they run (SessionDatabase, ReadConnection)
// and publishes that in an `opsh_sql_route`; it handles everything the
// fast path declines (first use of a statement, writes outside a
// transaction, dry runs, tables as parameters, db.NULL and db.blob).
#pragma once
#include "opsh_reader.h"
#include <stddef.h>
#include <stdint.h>
#include "opsh_lua.h"
#include "opsh_sql_guard.h"
#include "opsh_session_route.h"
// The same for PostgreSQL's rows (named here so that a build that had
// this module before the header existed sees it).
#include "opsh_pg.h"

// SQLite's handles (declared there, as sqlite3.h does) and the SQLite
// calls of the Swift slow path.
#include "opsh_sql_calls.h"

/// One prepared statement of the cache, owned by Swift's StatementCache.
typedef struct opsh_sql_entry {
    sqlite3 *connection;
    /// The Lua string holding the SQL: its address is the key; its bytes
    /// are compared too, since a collected string's address can be reused.
    const char *key;
    size_t length;
    char *bytes;
    sqlite3_stmt *statement;
    int readonly;
    /// It changes the schema: Swift runs it (a dropped table's rows are
    /// counted before it runs).
    int changes_schema;
    /// Registry reference of the rows' shape {names, row metatable, rows
    /// metatable} (LUA_NOREF until made), the column count it is for, and
    /// the statement's re-prepare count then: a step that prepares it again
    /// after a schema change (a script's ALTER TABLE, another process's)
    /// may change its columns under the same count (DROP b, ADD d).
    int shape_ref;
    int shape_columns;
    int shape_reprepares;
} opsh_sql_entry;



/// Pushes the text of an SQL failure (message and statement) the way
/// Swift's SQLFailure says it, so both paths fail alike.
typedef void (*opsh_sql_failure_text)(lua_State *L, const char *message, const char *sql);

/// Gives a note (one line, without `opsh: note: `) the session's way:
/// Swift makes its control characters visible and hands it to the
/// session's notes (`DatabaseSession.sayNotes`), which `--quiet` silences.
typedef void (*opsh_sql_note)(void *context, const char *text);

#define OPSH_SQL_RECENT 64

/// What the fast path reads: where the session's statements run (Store's
/// SessionDatabase publishes it), and the `db` module's own state.
typedef struct opsh_sql_route {
    /// The session's connections and counters (owned by SessionDatabase).
    opsh_session_route *session;
    opsh_sql_failure_text failure_text;
    /// A `db.rows` loop that keeps its snapshot says so here, once
    /// (opsh_rows_spill.h); `note_context` is the handler's.
    opsh_sql_note note;
    void *note_context;
    /// Nonzero while a batch run writes the rows it returns straight from
    /// the statement (opsh_returned_rows.h): a db.query of the outermost
    /// frame goes to Swift, which decides.
    int writes_returned_rows;
    /// Statements used lately, by the address of their SQL string.
    opsh_sql_entry *recent[OPSH_SQL_RECENT];
} opsh_sql_route;

opsh_sql_route *opsh_sql_route_new(void);
void opsh_sql_route_free(opsh_sql_route *route);

/// A cache entry for a statement prepared from the Lua string `key`.
opsh_sql_entry *opsh_sql_entry_new(sqlite3 *connection, const char *key, size_t length, sqlite3_stmt *statement);
/// Finalizes the statement and frees the entry (Swift unrefs the shape).
void opsh_sql_entry_free(opsh_sql_entry *entry);
int opsh_sql_entry_matches(const opsh_sql_entry *entry, sqlite3 *connection, const char *key, size_t length);
/// Makes `entry` findable by the fast path / forgets it (before freeing).
void opsh_sql_remember(opsh_sql_route *route, opsh_sql_entry *entry);
void opsh_sql_forget(opsh_sql_route *route, opsh_sql_entry *entry);



// MARK: Values

/// Binds the value at `index` to parameter `position`: nil NULL, booleans
/// 0/1, integers and floats as themselves, strings (with their length, a
/// NUL included) as TEXT when UTF-8 and as BLOB otherwise; SQLite's code
/// in `*code`. Returns 0 for NaN and any other type (the caller decides),
/// 2 when SQLite now points into the Lua string (not `copy`: the caller
/// clears the binding before the string may go), else 1. `copy` makes
/// SQLite copy the bytes.
int opsh_sql_bind_plain(lua_State *L, sqlite3_stmt *statement, int position, int index, int copy, int *code);
/// Pushes column `column` of the current row (NULL as nil).
void opsh_sql_push_column(lua_State *L, sqlite3_stmt *statement, int column);
/// Pushes the current row as a table of its non-NULL columns; `names` is
/// the stack index of the column names, `metatable` of the row metatable.
void opsh_sql_push_row(lua_State *L, sqlite3_stmt *statement, int column_count, int names, int metatable);
int opsh_utf8_valid(const char *bytes, size_t length);
/// Pushes the three values of a rows' shape (registry reference
/// `shape_ref`): names, row metatable, rows metatable; returns the index of
/// the names.
int opsh_sql_push_shape(lua_State *L, int shape_ref);

// MARK: The fast paths (see opsh_push_host_function_fast); data is the route

int opsh_sql_fast_exec(lua_State *L, void *route);
/// opsh_sql_fast_exec with the SQL text at stack index `base` (not 1),
/// the values above it; what is below stays (a repository's arguments).
int opsh_sql_fast_exec_at(lua_State *L, void *route, int base);
int opsh_sql_fast_first(lua_State *L, void *route);
int opsh_sql_fast_value(lua_State *L, void *route);
int opsh_sql_fast_query(lua_State *L, void *route);
/// The first column of every row, as an array (query keys' id lists).
int opsh_sql_fast_column(lua_State *L, void *route);

/// Pushes the iterator of a db.rows loop over `statement[0]` (the cursor
/// owns it; the iterator finalizes it and sets it to NULL at the end).
/// `statement[1]` not NULL: the cursor was closed by the end of its
/// transaction or chunk, and a further call raises an error saying so.
/// `owner` is the stack index of the value that keeps the cursor alive.
void opsh_sql_push_rows_iterator(lua_State *L, sqlite3_stmt **statement, int first, int owner, opsh_sql_route *route);

/// Rows built into Lua tables so far by this process, on either engine's
/// row path (a progress line reads it from its own thread).
unsigned long opsh_rows_built(void);
