// libFuzzer target: the transaction guard (Sources/CSQLiteStore/opsh_sql_guard.c).
// Each input is SQL. Its statements are compiled one by one on a
// connection whose authorizer records SQLITE_TRANSACTION and
// SQLITE_SAVEPOINT (an oracle independent of the guard's bytecode check);
// whatever the authorizer calls transaction control (and is not EXPLAIN)
// the guard must refuse, or this aborts.
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "opsh_sql_guard.h"

static int saw_control;

static int authorize(void *context, int action, const char *a, const char *b, const char *c, const char *d) {
    (void)context; (void)a; (void)b; (void)c; (void)d;
    if (action == SQLITE_TRANSACTION || action == SQLITE_SAVEPOINT) saw_control = 1;
    return SQLITE_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static sqlite3 *db;
    if (!db) {
        sqlite3_open(":memory:", &db);
        sqlite3_exec(db, "CREATE TABLE t (x); CREATE TEMP TABLE tt (y)", NULL, NULL, NULL);
        sqlite3_set_authorizer(db, authorize, NULL);
        sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, 4096);
    }
    char *sql = malloc(size + 1);
    memcpy(sql, data, size);
    sql[size] = 0;
    const char *cursor = sql;
    while (cursor && *cursor) {
        sqlite3_stmt *statement = NULL;
        const char *tail = NULL;
        saw_control = 0;
        int code = sqlite3_prepare_v2(db, cursor, -1, &statement, &tail);
        int control = saw_control;
        if (code != SQLITE_OK) break;
        if (statement) {
            int verdict = opsh_sql_is_transaction_control(db, statement);
            if (control && !sqlite3_stmt_isexplain(statement) && verdict == 0) abort();
            sqlite3_finalize(statement);
        }
        if (tail == cursor) break;
        cursor = tail;
    }
    free(sql);
    return 0;
}
