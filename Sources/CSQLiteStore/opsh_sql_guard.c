#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "opsh_sql_guard.h"

/// 1 when the bytecode of `statement` holds one of `opcodes`, 0 when not,
/// -1 when SQLite could not compile its EXPLAIN.
static int uses_opcode(sqlite3 *connection, sqlite3_stmt *statement, const char *const *opcodes, int count) {
    const char *text = sqlite3_sql(statement);
    if (!text) return -1;
    size_t length = strlen(text);
    static const char prefix[] = "EXPLAIN ";
    char *explain = malloc(sizeof prefix + length);
    if (!explain) return -1;
    memcpy(explain, prefix, sizeof prefix - 1);
    memcpy(explain + sizeof prefix - 1, text, length + 1);
    sqlite3_stmt *program = NULL;
    int code = sqlite3_prepare_v2(connection, explain, -1, &program, NULL);
    free(explain);
    if (code != SQLITE_OK || !program) {
        sqlite3_finalize(program);
        return -1;
    }
    int verdict = 0;
    while ((code = sqlite3_step(program)) == SQLITE_ROW) {
        const char *opcode = (const char *)sqlite3_column_text(program, 1);
        for (int index = 0; opcode && index < count && !verdict; index++) verdict = strcmp(opcode, opcodes[index]) == 0;
        if (verdict) break;
    }
    if (code != SQLITE_ROW && code != SQLITE_DONE) verdict = -1;
    sqlite3_finalize(program);
    return verdict;
}

int opsh_sql_is_transaction_control(sqlite3 *connection, sqlite3_stmt *statement) {
    if (sqlite3_stmt_isexplain(statement)) return 0;
    // BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT and RELEASE return no
    // columns: a statement that does (a query, RETURNING, most PRAGMAs) is
    // none of them and costs no second compilation. (Not
    // sqlite3_stmt_readonly: BEGIN IMMEDIATE is not read-only.)
    if (sqlite3_column_count(statement) > 0) return 0;
    static const char *const control[] = { "AutoCommit", "Savepoint" };
    return uses_opcode(connection, statement, control, 2);
}

int opsh_sql_drops_trigger(sqlite3 *connection, sqlite3_stmt *statement) {
    if (sqlite3_stmt_isexplain(statement) || sqlite3_column_count(statement) > 0) return 0;
    static const char *const drop[] = { "DropTrigger" };
    return uses_opcode(connection, statement, drop, 1);
}

int opsh_sql_set_defensive(sqlite3 *connection) {
    return sqlite3_db_config(connection, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
}
