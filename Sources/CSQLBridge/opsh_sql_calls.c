#include <sqlite3.h>
#include "opsh_sql_calls.h"

_Static_assert(OPSH_SQLITE_OK == SQLITE_OK, "SQLITE_OK");
_Static_assert(OPSH_SQLITE_ROW == SQLITE_ROW, "SQLITE_ROW");
_Static_assert(OPSH_SQLITE_DONE == SQLITE_DONE, "SQLITE_DONE");

int opsh_sqlite_step(sqlite3_stmt *statement) { return sqlite3_step(statement); }

void opsh_sqlite_reset_and_clear(sqlite3_stmt *statement) {
    sqlite3_reset(statement);
    sqlite3_clear_bindings(statement);
}

void opsh_sqlite_finalize(sqlite3_stmt *statement) { sqlite3_finalize(statement); }
long long opsh_sqlite_total_changes(sqlite3 *connection) { return sqlite3_total_changes64(connection); }
int opsh_sqlite_autocommit(sqlite3 *connection) { return sqlite3_get_autocommit(connection); }
int opsh_sqlite_readonly(sqlite3_stmt *statement) { return sqlite3_stmt_readonly(statement); }
const char *opsh_sqlite_sql(sqlite3_stmt *statement) { return sqlite3_sql(statement); }
int opsh_sqlite_column_count(sqlite3_stmt *statement) { return sqlite3_column_count(statement); }
int opsh_sqlite_reprepares(sqlite3_stmt *statement) { return sqlite3_stmt_status(statement, SQLITE_STMTSTATUS_REPREPARE, 0); }
const char *opsh_sqlite_column_name(sqlite3_stmt *statement, int column) { return sqlite3_column_name(statement, column); }

int opsh_sqlite_parameter_count(sqlite3_stmt *statement) { return sqlite3_bind_parameter_count(statement); }

const char *opsh_sqlite_parameter_name(sqlite3_stmt *statement, int position) {
    return sqlite3_bind_parameter_name(statement, position);
}

int opsh_sqlite_parameter_index(sqlite3_stmt *statement, const char *name) {
    return sqlite3_bind_parameter_index(statement, name);
}

int opsh_sqlite_bind_null(sqlite3_stmt *statement, int position) { return sqlite3_bind_null(statement, position); }

int opsh_sqlite_bind_blob_copy(sqlite3_stmt *statement, int position, const void *bytes, int length) {
    return sqlite3_bind_blob(statement, position, bytes, length, SQLITE_TRANSIENT);
}

const char *opsh_sqlite_errmsg(sqlite3 *connection) { return sqlite3_errmsg(connection); }
const char *opsh_sqlite_errstr(int code) { return sqlite3_errstr(code); }

void opsh_sql_push_changes(lua_State *L, sqlite3 *connection) {
    lua_pushinteger(L, sqlite3_changes64(connection));
    lua_pushinteger(L, sqlite3_last_insert_rowid(connection));
}

int opsh_sql_schema_version(sqlite3 *connection, sqlite3_stmt **statement, int64_t *version) {
    if (!*statement) {
        sqlite3_stmt *prepared = NULL;
        if (sqlite3_prepare_v2(connection, "PRAGMA schema_version", -1, &prepared, NULL) != SQLITE_OK) {
            sqlite3_finalize(prepared);
            return 0;
        }
        *statement = prepared;
    }
    int read = sqlite3_step(*statement) == SQLITE_ROW;
    if (read) *version = sqlite3_column_int64(*statement, 0);
    sqlite3_reset(*statement);
    return read;
}
