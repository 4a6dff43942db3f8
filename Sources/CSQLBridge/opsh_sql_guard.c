#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "opsh_sql_guard.h"

int opsh_sql_is_transaction_control(sqlite3 *connection, sqlite3_stmt *statement) {
    if (sqlite3_stmt_isexplain(statement)) return 0;
    // BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT and RELEASE return no
    // columns: a statement that does (a query, RETURNING, most PRAGMAs) is
    // none of them and costs no second compilation. (Not
    // sqlite3_stmt_readonly: BEGIN IMMEDIATE is not read-only.)
    if (sqlite3_column_count(statement) > 0) return 0;
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
        if (opcode && (strcmp(opcode, "AutoCommit") == 0 || strcmp(opcode, "Savepoint") == 0)) {
            verdict = 1;
            break;
        }
    }
    if (code != SQLITE_ROW && code != SQLITE_DONE) verdict = -1;
    sqlite3_finalize(program);
    return verdict;
}
