#include <sqlite3.h>
#include "opsh_sql.h"
#include "opsh_rows_built.h"
#include "opsh_rows_spill.h"
#include "opsh_lua_table.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// MARK: Route and cache entries

opsh_sql_route *opsh_sql_route_new(void) { return calloc(1, sizeof(opsh_sql_route)); }
void opsh_sql_route_free(opsh_sql_route *route) { free(route); }

opsh_sql_entry *opsh_sql_entry_new(sqlite3 *connection, const char *key, size_t length, sqlite3_stmt *statement) {
    opsh_sql_entry *entry = calloc(1, sizeof *entry);
    char *bytes = malloc(length + 1);
    if (!entry || !bytes) {
        free(entry);
        free(bytes);
        return NULL;
    }
    memcpy(bytes, key, length);
    bytes[length] = 0;
    entry->connection = connection;
    entry->key = key;
    entry->length = length;
    entry->bytes = bytes;
    entry->statement = statement;
    entry->readonly = sqlite3_stmt_readonly(statement) != 0;
    entry->shape_ref = LUA_NOREF;
    entry->shape_columns = -1;
    entry->shape_reprepares = -1;
    return entry;
}

void opsh_sql_entry_free(opsh_sql_entry *entry) {
    sqlite3_finalize(entry->statement);
    free(entry->bytes);
    free(entry);
}

int opsh_sql_entry_matches(const opsh_sql_entry *entry, sqlite3 *connection, const char *key, size_t length) {
    return entry->connection == connection && entry->key == key && entry->length == length
        && memcmp(entry->bytes, key, length) == 0;
}

static size_t recent_slot(const char *key) {
    // Lua strings are 8-aligned; mix the higher bits in.
    uintptr_t address = (uintptr_t)key;
    return (size_t)((address >> 4) ^ (address >> 10)) % OPSH_SQL_RECENT;
}

// Two slots a key: its own and its pair's (slot ^ 1). With one, two
// texts a loop runs in turn whose strings fell on the same slot (a
// repository write and its read-back) pushed each other out every call,
// and both went to Swift every time: which texts collide depends only on
// where Lua allocated their strings (issue 27: a logs.insert in
// db.transaction took 15 % more instructions after unrelated changes
// moved its strings).
void opsh_sql_remember(opsh_sql_route *route, opsh_sql_entry *entry) {
    size_t slot = recent_slot(entry->key);
    opsh_sql_entry *home = route->recent[slot];
    if (home && home != entry && home->key != entry->key) {
        // The one there moves to the pair's slot, where the older goes.
        route->recent[slot ^ 1] = home;
    }
    route->recent[slot] = entry;
}

void opsh_sql_forget(opsh_sql_route *route, opsh_sql_entry *entry) {
    size_t slot = recent_slot(entry->key);
    if (route->recent[slot] == entry) route->recent[slot] = NULL;
    if (route->recent[slot ^ 1] == entry) route->recent[slot ^ 1] = NULL;
}


// MARK: Values

int opsh_utf8_valid(const char *text, size_t length) {
    const unsigned char *bytes = (const unsigned char *)text;
    size_t index = 0;
    while (index < length) {
        // ASCII eight bytes at a time (most bound text is ASCII).
        if (length - index >= 8) {
            uint64_t eight;
            memcpy(&eight, bytes + index, 8);
            if (!(eight & 0x8080808080808080ULL)) { index += 8; continue; }
        }
        unsigned char byte = bytes[index];
        if (byte < 0x80) { index++; continue; }
        size_t width;
        if ((byte & 0xE0) == 0xC0 && byte >= 0xC2) width = 2;
        else if ((byte & 0xF0) == 0xE0) width = 3;
        else if ((byte & 0xF8) == 0xF0 && byte <= 0xF4) width = 4;
        else return 0;
        if (index + width > length) return 0;
        for (size_t offset = 1; offset < width; offset++)
            if ((bytes[index + offset] & 0xC0) != 0x80) return 0;
        unsigned char second = bytes[index + 1];
        if (width == 3 && ((byte == 0xE0 && second < 0xA0) || (byte == 0xED && second >= 0xA0))) return 0;  // overlong, surrogates
        if (width == 4 && ((byte == 0xF0 && second < 0x90) || (byte == 0xF4 && second >= 0x90))) return 0;
        index += width;
    }
    return 1;
}

int opsh_sql_bind_plain(lua_State *L, sqlite3_stmt *statement, int position, int index, int copy, int *code) {
    switch (lua_type(L, index)) {
    case LUA_TNIL:
    case LUA_TNONE:
        *code = sqlite3_bind_null(statement, position);
        return 1;
    case LUA_TBOOLEAN:
        *code = sqlite3_bind_int64(statement, position, lua_toboolean(L, index) ? 1 : 0);
        return 1;
    case LUA_TNUMBER:
        if (lua_isinteger(L, index)) {
            *code = sqlite3_bind_int64(statement, position, lua_tointeger(L, index));
            return 1;
        }
        {
            lua_Number number = lua_tonumber(L, index);
            // NaN is refused by Swift (StatementBridge), naming the value:
            // SQLite would store it as NULL.
            if (isnan(number)) return 0;
            *code = sqlite3_bind_double(statement, position, number);
            return 1;
        }
    case LUA_TSTRING: {
        size_t length;
        const char *bytes = lua_tolstring(L, index, &length);
        // SQLITE_STATIC: the string stays on the Lua stack until the
        // statement is reset.
        sqlite3_destructor_type destructor = copy ? SQLITE_TRANSIENT : SQLITE_STATIC;
        if (opsh_utf8_valid(bytes, length)) *code = sqlite3_bind_text(statement, position, bytes, (int)length, destructor);
        else *code = sqlite3_bind_blob(statement, position, bytes, (int)length, destructor);
        return copy ? 1 : 2;
    }
    default:
        return 0;
    }
}

/// Pushes `value` (a column of the current row), whose type SQLite said
/// is `type`.
static void push_typed_value(lua_State *L, sqlite3_value *value, int type) {
    switch (type) {
    case SQLITE_INTEGER:
        lua_pushinteger(L, sqlite3_value_int64(value));
        break;
    case SQLITE_FLOAT:
        lua_pushnumber(L, sqlite3_value_double(value));
        break;
    case SQLITE_TEXT: {
        const unsigned char *text = sqlite3_value_text(value);
        lua_pushlstring(L, text ? (const char *)text : "", (size_t)sqlite3_value_bytes(value));
        break;
    }
    case SQLITE_BLOB: {
        const void *blob = sqlite3_value_blob(value);
        lua_pushlstring(L, blob ? (const char *)blob : "", (size_t)sqlite3_value_bytes(value));
        break;
    }
    default:
        lua_pushnil(L);
    }
}

// A column is read through sqlite3_column_value once, not as
// sqlite3_column_type and then sqlite3_column_int64 (or _text): each
// sqlite3_column_* call finds the column again and takes the connection's
// mutex (about 30 instructions a column on the NOMUTEX reader, callgrind
// of the bench's scan; BENCHMARKS.md, "Lua: SQL from scripts, side by
// side"). The value is read without that mutex, as a pointer that
// sqlite3_column_text returned always was: the statement is stepped and
// read by this thread only, between steps.
void opsh_sql_push_column(lua_State *L, sqlite3_stmt *statement, int column) {
    sqlite3_value *value = sqlite3_column_value(statement, column);
    push_typed_value(L, value, sqlite3_value_type(value));
}

// Pushes the current row as a table of its non-NULL columns. The names
// come from the array at `names`, except the first `named` columns':
// db.rows's iterator holds those names as upvalues from ROWS_FIRST_NAME
// on, and pushes each as a copy of its upvalue (a name read from an
// upvalue's array costs a table read more, per column and row).
#define ROWS_FIRST_NAME 5
// Lua's limit on a C closure's upvalues is 255.
#define ROWS_NAMED_MAX (255 - ROWS_FIRST_NAME + 1)

static inline __attribute__((always_inline)) void push_row(lua_State *L, sqlite3_stmt *statement, int column_count,
                                                           int names, int metatable, int named) {
    opsh_count_row();
    // Sized exactly: a table made empty would be rehashed at its first
    // field (Lua's rehash counts the keys and resizes, twice the work).
    lua_createtable(L, 0, column_count);
    for (int column = 0; column < column_count; column++) {
        sqlite3_value *value = sqlite3_column_value(statement, column);
        int type = sqlite3_value_type(value);
        if (type == SQLITE_NULL) continue;
        if (column < named) lua_pushvalue(L, lua_upvalueindex(ROWS_FIRST_NAME + column));
        else lua_rawgeti(L, names, column + 1);
        push_typed_value(L, value, type);
        lua_rawset(L, -3);
    }
    lua_pushvalue(L, metatable);
    lua_setmetatable(L, -2);
}

_Atomic unsigned long opsh_rows_built_counter;

unsigned long opsh_rows_built(void) {
    return atomic_load_explicit(&opsh_rows_built_counter, memory_order_relaxed);
}

void opsh_sql_push_row(lua_State *L, sqlite3_stmt *statement, int column_count, int names, int metatable) {
    push_row(L, statement, column_count, names, metatable, 0);
}

// MARK: The fast paths

enum result_shape { SHAPE_CHANGES, SHAPE_FIRST, SHAPE_VALUE, SHAPE_ROWS, SHAPE_COLUMN };

/// Raises (through OPSH_RAISE) the connection's error about `statement`.
static int fail(lua_State *L, opsh_sql_route *route, sqlite3 *connection, sqlite3_stmt *statement) {
    route->failure_text(L, sqlite3_errmsg(connection), sqlite3_sql(statement));
    return OPSH_RAISE;
}

int opsh_sql_push_shape(lua_State *L, int shape_ref) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, shape_ref);
    int holder = lua_gettop(L);
    lua_rawgeti(L, holder, 1);
    lua_rawgeti(L, holder, 2);
    lua_rawgeti(L, holder, 3);
    lua_remove(L, holder);
    return holder;
}

// Whether `statement`'s columns are now, in order, the names of the array
// at `names` (a shape's): after SQLite prepared it again in a step (the
// schema changed, or STAT4 re-planned it for its bound values) its columns
// may be others under the same count (DROP b, ADD d).
static int columns_are(lua_State *L, int names, sqlite3_stmt *statement) {
    int count = sqlite3_column_count(statement);
    if ((lua_Integer)lua_rawlen(L, names) != count) return 0;
    for (int column = 0; column < count; column++) {
        lua_rawgeti(L, names, column + 1);
        const char *name = lua_tostring(L, -1);
        const char *now = sqlite3_column_name(statement, column);
        int same = name && now && strcmp(name, now) == 0;
        lua_pop(L, 1);
        if (!same) return 0;
    }
    return 1;
}

// Both inlined into each opsh_sql_fast_*, so that each is made for its
// one shape: left to the compiler, `run` became a call of its own taking
// the shape as a value (about 45 instructions more per db.exec in the
// bench's insert loop, callgrind).
#define OPSH_SHAPED static inline __attribute__((always_inline))

OPSH_SHAPED int run_statement(lua_State *L, opsh_sql_route *route, enum result_shape shape, sqlite3 *connection, int sql_index);

// `sql_index`: the stack index of the SQL text, its values above it (1 for a
// db function's own call; a repository write keeps its call's arguments
// below, opsh_sql_fast_exec_at).
OPSH_SHAPED int run(lua_State *L, opsh_sql_route *route, enum result_shape shape, int sql_index) {
    if (lua_type(L, sql_index) != LUA_TSTRING) return OPSH_DECLINE;
    lua_Debug below;
    if (shape == SHAPE_ROWS && route->writes_returned_rows && !lua_getstack(L, 2, &below)) return OPSH_DECLINE;
    if (route->session->transaction) {
        // A trigger's RAISE(ROLLBACK) ends the transaction under db.transaction:
        // stepped here, the writes after it would each commit on their own.
        // Swift refuses them ("Transaction was aborted").
        if (sqlite3_get_autocommit(route->session->transaction)) return OPSH_DECLINE;
        return run_statement(L, route, shape, route->session->transaction, sql_index);
    }
    opsh_sql_reader *reader = route->session->reader;
    if (!reader) return OPSH_DECLINE;
    // The read connection is NOMUTEX: the whole call holds the reader's
    // lock, against its watchdog (opsh_reader.h). Nothing here unwinds: a
    // fast path's allocations pass the memory limit (opsh_lua.h).
    opsh_sql_reader_enter(reader);
    int results = run_statement(L, route, shape, reader->handle, sql_index);
    opsh_sql_reader_leave(reader);
    return results;
}

OPSH_SHAPED int run_statement(lua_State *L, opsh_sql_route *route, enum result_shape shape, sqlite3 *connection, int sql_index) {
    size_t length;
    const char *sql = lua_tolstring(L, sql_index, &length);
    size_t slot = recent_slot(sql);
    opsh_sql_entry *entry = route->recent[slot];
    if (!entry || !opsh_sql_entry_matches(entry, connection, sql, length)) {
        entry = route->recent[slot ^ 1];
        if (!entry || !opsh_sql_entry_matches(entry, connection, sql, length)) return OPSH_DECLINE;
    }
    sqlite3_stmt *statement = entry->statement;

    // What Swift does itself: writes outside a transaction (GRDB's
    // writer), writes of a dry run (counted), rows without a shape yet.
    int column_count = sqlite3_column_count(statement);
    if (!entry->readonly && (!route->session->transaction || route->session->dry_run)) return OPSH_DECLINE;
    if (entry->changes_schema) return OPSH_DECLINE;
    if ((shape == SHAPE_FIRST || shape == SHAPE_ROWS) && entry->shape_columns != column_count) return OPSH_DECLINE;
    // A write's rows (RETURNING) are named after its step, which cannot be
    // taken back to decline (see the shape check after the step).
    if ((shape == SHAPE_FIRST || shape == SHAPE_ROWS) && !entry->readonly) return OPSH_DECLINE;

    // Positional values of plain types only; tables, db.NULL, db.blob and
    // wrong counts go to Swift (which explains what is wrong).
    int given = lua_gettop(L) - sql_index;
    if (given != sqlite3_bind_parameter_count(statement)) return OPSH_DECLINE;
    // Whether a bound value points into a Lua string (see the reset below).
    int points_into_lua = 0;
    for (int position = 1; position <= given; position++) {
        int code = SQLITE_OK;
        int bound = opsh_sql_bind_plain(L, statement, position, position + sql_index, 0, &code);
        if (!bound || code != SQLITE_OK) {
            sqlite3_clear_bindings(statement);
            return OPSH_DECLINE;
        }
        points_into_lua |= bound == 2;
    }
    if (!route->session->transaction) opsh_sql_reader_use_snapshot(route->session->reader, route->session->write_count);
    else if (!entry->readonly) route->session->changed_outside = 1;

    int results = 1;
    int base = lua_gettop(L);
    // A result past the memory limit: refused as its rows are made.
    int over_limit = 0;
    // The rows it changes are counted by the writer connection's
    // preupdate hook (CSQLiteStore/opsh_changes.c).
    int code = sqlite3_step(statement);
    // The step prepared the statement again (the schema changed since its
    // shape was made): its columns may be others under the same count, and
    // rows named by the old shape would put values under wrong names. Unless
    // they are the same, a read goes to Swift, which makes the shape anew
    // and runs it again.
    if (shape == SHAPE_FIRST || shape == SHAPE_ROWS) {
        int reprepares = sqlite3_stmt_status(statement, SQLITE_STMTSTATUS_REPREPARE, 0);
        if (reprepares != entry->shape_reprepares) {
            int names = opsh_sql_push_shape(L, entry->shape_ref);
            int same = columns_are(L, names, statement);
            lua_settop(L, names - 1);
            if (!same) {
                sqlite3_reset(statement);
                sqlite3_clear_bindings(statement);
                return OPSH_DECLINE;
            }
            entry->shape_reprepares = reprepares;
        }
    }
    column_count = sqlite3_column_count(statement);
    switch (shape) {
    case SHAPE_CHANGES:
        while (code == SQLITE_ROW) code = sqlite3_step(statement);
        if (code != SQLITE_DONE) break;
        lua_pushinteger(L, sqlite3_changes64(connection));
        lua_pushinteger(L, sqlite3_last_insert_rowid(connection));
        results = 2;
        break;
    case SHAPE_VALUE:
        if (code == SQLITE_ROW && column_count > 0) opsh_sql_push_column(L, statement, 0);
        else if (code == SQLITE_DONE || code == SQLITE_ROW) lua_pushnil(L);
        break;
    case SHAPE_FIRST:
        if (code == SQLITE_ROW) {
            int names = opsh_sql_push_shape(L, entry->shape_ref);
            opsh_sql_push_row(L, statement, column_count, names, names + 1);
            lua_replace(L, names);
            lua_settop(L, names);
        } else if (code == SQLITE_DONE) {
            lua_pushnil(L);
        }
        break;
    case SHAPE_COLUMN: {
        lua_createtable(L, 0, 0);
        lua_Integer count = 0;
        while (code == SQLITE_ROW && column_count > 0) {
            opsh_sql_push_column(L, statement, 0);
            lua_rawseti(L, -2, ++count);
            if ((over_limit = opsh_rows_pass_memory_limit(L, base, count))) break;
            code = sqlite3_step(statement);
        }
        break;
    }
    case SHAPE_ROWS: {
        int names = opsh_sql_push_shape(L, entry->shape_ref);
        lua_createtable(L, 0, 0);
        lua_Integer count = 0;
        while (code == SQLITE_ROW) {
            opsh_sql_push_row(L, statement, column_count, names, names + 1);
            lua_rawseti(L, -2, ++count);
            if ((over_limit = opsh_rows_pass_memory_limit(L, base, count))) break;
            code = sqlite3_step(statement);
        }
        if (code != SQLITE_DONE) break;
        lua_pushvalue(L, names + 2);
        lua_setmetatable(L, -2);
        lua_replace(L, names);
        lua_settop(L, names);
        break;
    }
    }
    if (over_limit) {
        sqlite3_reset(statement);
        sqlite3_clear_bindings(statement);
        return OPSH_RAISE;
    }
    if (code != SQLITE_DONE && code != SQLITE_ROW) {
        int failed = fail(L, route, connection, statement);
        sqlite3_reset(statement);
        sqlite3_clear_bindings(statement);
        return failed;
    }
    // Bound strings point into the Lua stack: drop them with the reset.
    // Numbers and NULLs point nowhere and may stay: every route binds all
    // of a statement's parameters before it steps it (here, and
    // StatementBridge.bind), and a point query saves the clearing.
    sqlite3_reset(statement);
    if (points_into_lua) sqlite3_clear_bindings(statement);
    return results;
}

int opsh_sql_fast_exec(lua_State *L, void *route) { return run(L, route, SHAPE_CHANGES, 1); }
int opsh_sql_fast_exec_at(lua_State *L, void *route, int base) { return run(L, route, SHAPE_CHANGES, base); }
int opsh_sql_fast_first(lua_State *L, void *route) { return run(L, route, SHAPE_FIRST, 1); }
int opsh_sql_fast_value(lua_State *L, void *route) { return run(L, route, SHAPE_VALUE, 1); }
int opsh_sql_fast_query(lua_State *L, void *route) { return run(L, route, SHAPE_ROWS, 1); }
int opsh_sql_fast_column(lua_State *L, void *route) { return run(L, route, SHAPE_COLUMN, 1); }

// MARK: db.rows

// Upvalues: 1 the cursor's owner (keeps it alive), 2 the iterator's state
// (a userdata: the statement slot and the route), 3 the column names, 4 the
// row metatable, and from ROWS_FIRST_NAME on the first `named` names.
typedef struct rows_state {
    sqlite3_stmt **slot;
    opsh_sql_route *route;
    /// opsh_host_flag's, looked up once per loop rather than twice a row.
    int *in_host;
    /// The allocator's count and limit, looked up once per loop: a row
    /// checks them without a call.
    const opsh_memory_meter *meter;
    /// The code of the statement's first step, taken before its shape was
    /// made (SQLITE_ROW or SQLITE_DONE), until the first call uses it.
    int first;
    /// The statement's columns, read once: only its first step, taken
    /// before the shape was made, can prepare it again and change them.
    int column_count;
    /// The names held as upvalues (see push_row).
    int named;
    /// The read connection's `overdue` while the statement is on it, else
    /// opsh_rows_never_overdue, and its value this loop saw last: one load
    /// and a compare a row (opsh_rows_spill.h).
    const int *overdue;
    /// What the loop saw of the watchdog's marks, and its rows.
    opsh_rows_pace pace;
    /// Where the loop began, for the note of a copy that keeps its
    /// snapshot (opsh_rows_spill.h); read only on the read connection.
    opsh_rows_origin origin;
    /// The statement failed after the rows copied: the failure's words
    /// (the state's user value) are raised once the copy's rows are read.
    int fails_after_copy;
#ifdef OPSH_LUA_TABLE_LAYOUT
    /// The template row (the state's second user value, which keeps it as
    /// long as the state), its size when checked, and each column's node in
    /// it; NULL: rows are made field by field.
    const opsh_lua_table *template;
    unsigned char template_log_node_count;
    unsigned char template_node_of[];
#endif
} rows_state;

// MARK: A row as a copy
//
// Most of a row's cost was its table built field by field: a key looked up,
// not found and inserted per column, then the metatable set (about 220
// instructions a row of the bench's one-column scan, callgrind; BENCHMARKS.md,
// "Lua: SQL from scripts, side by side"). A loop whose columns fit makes,
// once, a template: a table sized and filled as push_row fills a row (the
// same names in the same order, each `true`) with the row metatable. Each
// row without a NULL is then Lua's table of the same size (lua_createtable,
// which allocates and counts it against --memory-limit) whose nodes are a
// copy of the template's: the same keys in the same places, so the same table
// push_row makes, bit for bit. Numbers are written in place; text and blobs
// are set through lua_rawset (the key found), which keeps the collector's
// barrier for the new string. A row with a NULL (no field, where the
// template has one) and a metatable that may hold __gc (whose rows Lua must
// mark for finalization in lua_setmetatable) take push_row's way.
#ifdef OPSH_LUA_TABLE_LAYOUT
// The most columns a template serves (their values are read before the row
// is made, into an array on the C stack).
#define ROWS_TEMPLATE_MOST 64

// Makes the template of a loop whose names are the array at `names` (one
// per column, `column_count` of them) and whose rows' metatable is at
// `metatable`, and checks it against opsh_lua_table's layout, reading each
// column's node. Pushes the template, or nil when it does not serve.
static void push_rows_template(lua_State *L, rows_state *state, int names, int metatable) {
    int column_count = state->column_count;
    state->template = NULL;
    if (column_count < 1 || column_count > ROWS_TEMPLATE_MOST || (lua_Integer)lua_rawlen(L, names) != column_count
        || !lua_checkstack(L, 4)) {
        lua_pushnil(L);
        return;
    }
    lua_createtable(L, 0, column_count);
    int template = lua_gettop(L);
    for (int column = 0; column < column_count; column++) {
        if (lua_rawgeti(L, names, column + 1) != LUA_TSTRING) {
            lua_settop(L, template - 1);
            lua_pushnil(L);
            return;
        }
        lua_pushboolean(L, 1);
        lua_rawset(L, template);
    }
    lua_pushvalue(L, metatable);
    lua_setmetatable(L, template);
    const opsh_lua_table *table = (const opsh_lua_table *)lua_topointer(L, template);
    size_t node_count = (size_t)1 << table->log_node_count;
    int fits = table->array_limit == 0 && table->array == NULL && table->node != NULL && table->flags == 0
        && table->metatable == (const opsh_lua_table *)lua_topointer(L, metatable)
        && node_count >= (size_t)column_count && node_count <= 2 * ROWS_TEMPLATE_MOST
        && table->last_free >= table->node && table->last_free <= table->node + node_count;
    for (int column = 0; fits && column < column_count; column++) {
        lua_rawgeti(L, names, column + 1);
        const void *name = lua_topointer(L, -1);
        lua_pop(L, 1);
        int found = -1;
        for (size_t index = 0; index < node_count; index++) {
            const opsh_lua_node *node = &table->node[index];
            if (node->u.key.gc == name) {
                fits = found < 0 && node->u.value_tag == OPSH_LUA_TAG_TRUE
                    && (node->u.key_tag == OPSH_LUA_TAG_SHORT_KEY || node->u.key_tag == OPSH_LUA_TAG_LONG_KEY);
                found = (int)index;
            }
        }
        fits = fits && found >= 0;
        if (fits) state->template_node_of[column] = (unsigned char)found;
    }
    if (!fits) {
        lua_settop(L, template - 1);
        lua_pushnil(L);
        return;
    }
    state->template = table;
    state->template_log_node_count = table->log_node_count;
}

// Pushes the current row as a copy of the template; 0 (nothing pushed) when
// the row takes push_row's way.
static inline __attribute__((always_inline)) int push_row_copy(lua_State *L, sqlite3_stmt *statement, const rows_state *state) {
    const opsh_lua_table *template = state->template;
    int column_count = state->column_count;
    // The template is the iterator's own, but a script with the debug
    // library could reach it: copied, it must still be the size it was.
    if (template->log_node_count != state->template_log_node_count
        || !(template->metatable->flags & OPSH_LUA_FLAG_NO_GC)) {
        return 0;
    }
    sqlite3_value *values[ROWS_TEMPLATE_MOST];
    int types[ROWS_TEMPLATE_MOST];
    for (int column = 0; column < column_count; column++) {
        values[column] = sqlite3_column_value(statement, column);
        types[column] = sqlite3_value_type(values[column]);
        if (types[column] == SQLITE_NULL) return 0;
    }
    lua_createtable(L, 0, column_count);
    opsh_lua_table *row = (opsh_lua_table *)lua_topointer(L, -1);
    if (row->log_node_count != template->log_node_count) {
        lua_pop(L, 1);
        return 0;
    }
    opsh_count_row();
    size_t node_count = (size_t)1 << template->log_node_count;
    memcpy(row->node, template->node, node_count * sizeof *row->node);
    row->last_free = row->node + (template->last_free - template->node);
    row->flags = 0;  // as lua_rawset leaves it
    // No barrier: the keys and the metatable are held by the template and
    // the iterator, whatever the collector's step in lua_createtable made of
    // the new row (text, new, goes through lua_rawset and its barrier).
    row->metatable = template->metatable;
    for (int column = 0; column < column_count; column++) {
        sqlite3_value *value = values[column];
        opsh_lua_node *node = &row->node[state->template_node_of[column]];
        switch (types[column]) {
        case SQLITE_INTEGER:
            node->u.value.i = sqlite3_value_int64(value);
            node->u.value_tag = OPSH_LUA_TAG_INTEGER;
            break;
        case SQLITE_FLOAT:
            node->u.value.n = sqlite3_value_double(value);
            node->u.value_tag = OPSH_LUA_TAG_FLOAT;
            break;
        default:
            if (column < state->named) lua_pushvalue(L, lua_upvalueindex(ROWS_FIRST_NAME + column));
            else lua_rawgeti(L, lua_upvalueindex(3), column + 1);
            push_typed_value(L, value, types[column]);
            lua_rawset(L, -3);
        }
    }
    return 1;
}
#endif

// The statement may be on the read connection (NOMUTEX): while it is open
// the watchdog leaves that connection alone (opsh_reader.h), so a row is
// stepped and made without the reader's lock, and only the finalize takes
// it. Each call counts as a host frame, so that an allocation past the
// memory limit does not unwind it; the limit is checked once the row is
// made.
static int rows_next(lua_State *L) {
    rows_state *state = (rows_state *)lua_touserdata(L, lua_upvalueindex(2));
    sqlite3_stmt *statement = state->slot[0];
    if (!statement) {
        // Closed by the end of the transaction or the shell's chunk that
        // opened it (slot[1]): a loop read on later says so rather than
        // ending as if its rows were all read.
        if (state->slot[1]) {
            return luaL_error(L, "db.rows: this loop was closed when the transaction or chunk that opened it "
                                 "ended (opsh keeps no read open past them); run db.rows again");
        }
        lua_pushnil(L);
        return 1;
    }
    opsh_sql_reader *reader = state->route->session->reader;
    int outer = *state->in_host;
    *state->in_host = 1;
    // The first step was taken as the loop began (SQLCursor), before the
    // shape was made: a step that prepares the statement again (another
    // connection changed the schema since this connection read it) may
    // change its columns, and only the first step can.
    int code = state->first;
    state->first = 0;
    state->pace.rows++;
    if (!code && __atomic_load_n(state->overdue, __ATOMIC_RELAXED) != state->pace.mark) {
        code = opsh_rows_when_overdue(L, state->slot, state->route, &state->overdue, &state->pace, &state->origin);
        statement = state->slot[0];
        if (code == OPSH_ROWS_SPILL_FAILED) {
            *state->in_host = outer;
            return opsh_raise_where(L);
        }
        if (code & OPSH_ROWS_COPY_THEN_FAIL) {
            code &= ~OPSH_ROWS_COPY_THEN_FAIL;
            lua_setiuservalue(L, lua_upvalueindex(2), 1);
            state->fails_after_copy = 1;
        }
    }
    if (!code) code = sqlite3_step(statement);
    // (A row's path compares once, as before: ROW first.)
    while (__builtin_expect(code != SQLITE_ROW, 0) && code == SQLITE_DONE && state->slot[2]) {
        // The copy held only the first part of the rest (its most, or a
        // write failed: opsh_rows_spill.h): the loop reads on from the next
        // part, at last from its statement, still open.
        opsh_sql_reader_finalize_cursor(reader, statement);
        statement = state->slot[0] = state->slot[2];
        state->slot[2] = state->slot[3];
        state->slot[3] = NULL;
        code = sqlite3_step(statement);
    }
    if (code == SQLITE_ROW) {
#ifdef OPSH_LUA_TABLE_LAYOUT
        if (!state->template || !push_row_copy(L, statement, state))
#endif
            push_row(L, statement, state->column_count, lua_upvalueindex(3), lua_upvalueindex(4), state->named);
    } else {
        if (code == SQLITE_DONE && state->fails_after_copy) {
            // Where the loop meets the failure its statement met while
            // copied: after the rows before it (opsh_rows_spill.h).
            state->fails_after_copy = 0;
            lua_getiuservalue(L, lua_upvalueindex(2), 1);
            code = SQLITE_ERROR;
        } else if (code == SQLITE_DONE) lua_pushnil(L);
        else state->route->failure_text(L, sqlite3_errmsg(sqlite3_db_handle(statement)), sqlite3_sql(statement));
        state->slot[0] = NULL;
        if (reader) opsh_sql_reader_finalize_cursor(reader, statement);
        else sqlite3_finalize(statement);
    }
    if (code == SQLITE_ROW && opsh_memory_may_exceed(state->meter) && opsh_memory_exceeded(L)) {
        lua_pop(L, 1);
        lua_gc(L, LUA_GCCOLLECT);
        // Still a host frame: the refusal's words are allocated past the
        // limit. Made after the frame, they failed whenever the script
        // itself held the memory (rows it keeps), and Lua's bare "not
        // enough memory" replaced them (RowsLoopMemoryLimitTests).
        opsh_push_memory_refusal(L, "the rows of this query would pass it");
        luaL_where(L, 1);
        lua_insert(L, -2);
        lua_concat(L, 2);
        *state->in_host = outer;
        return lua_error(L);
    }
    *state->in_host = outer;
    if (code != SQLITE_ROW && code != SQLITE_DONE) return opsh_raise_where(L);
    return 1;
}

void opsh_sql_push_rows_iterator(lua_State *L, sqlite3_stmt **statement, int first, int owner, opsh_sql_route *route) {
    // The shape holder is on top of the stack.
    int holder = lua_gettop(L);
    lua_pushvalue(L, owner);
    // Its user values: the words of a failure met while copying, and the
    // template row.
    int column_count = statement[0] ? sqlite3_column_count(statement[0]) : 0;
    size_t size = sizeof(rows_state);
#ifdef OPSH_LUA_TABLE_LAYOUT
    size += column_count <= ROWS_TEMPLATE_MOST ? (size_t)column_count : 0;
#endif
    rows_state *state = (rows_state *)lua_newuserdatauv(L, size, 2);
    state->slot = statement;
    state->route = route;
    state->in_host = opsh_host_flag(L);
    state->meter = opsh_memory_meter_of(L);
    state->first = first;
    state->column_count = column_count;
    opsh_sql_reader *reader = route->session->reader;
    state->overdue = reader && statement[0] && sqlite3_db_handle(statement[0]) == reader->handle
        ? &reader->overdue : &opsh_rows_never_overdue;
    // A mark made before this loop began is not about its rows.
    state->pace = (opsh_rows_pace){ .mark = __atomic_load_n(state->overdue, __ATOMIC_RELAXED) };
    // Level 1: the function that called db.rows (this runs inside it).
    // Only a loop that may be copied can need it.
    state->origin.line = 0;
    if (state->overdue != &opsh_rows_never_overdue) opsh_rows_origin_take(L, 1, &state->origin);
    state->fails_after_copy = 0;
    lua_rawgeti(L, holder, 1);
    int names = lua_gettop(L);
    lua_rawgeti(L, holder, 2);
#ifdef OPSH_LUA_TABLE_LAYOUT
    push_rows_template(L, state, names, names + 1);
    lua_setiuservalue(L, names - 1, 2);
#endif
    int named = (int)lua_rawlen(L, names);
    if (named > state->column_count) named = state->column_count;
    if (named > ROWS_NAMED_MAX) named = ROWS_NAMED_MAX;
    // Without the room, every name is read from the array.
    if (!lua_checkstack(L, named)) named = 0;
    state->named = named;
    for (int column = 0; column < named; column++) lua_rawgeti(L, names, column + 1);
    lua_pushcclosure(L, rows_next, ROWS_FIRST_NAME - 1 + named);
    lua_remove(L, holder);
}
