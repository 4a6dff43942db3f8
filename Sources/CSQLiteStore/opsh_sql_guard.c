#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "opsh_sql_guard.h"

/// Whether an opcode can appear in the program of a schema statement that
/// does nothing now (see opsh_sql_guard.h).
static int only_verifies_schema(const char *opcode) {
    static const char *const allowed[] = { "Init", "Halt", "Transaction", "Goto", "JournalMode", "Noop", "TableLock" };
    for (size_t index = 0; index < sizeof allowed / sizeof *allowed; index++) {
        if (strcmp(opcode, allowed[index]) == 0) return 1;
    }
    return 0;
}

static void add_dropped(opsh_sql_effects *effects, size_t *length, const char *name) {
    size_t size = strlen(name) + 1;
    char *grown = realloc(effects->dropped_tables, *length + size + 1);
    if (!grown) return;
    memcpy(grown + *length, name, size);
    *length += size;
    grown[*length] = 0;
    effects->dropped_tables = grown;
}

int opsh_sql_classify(sqlite3 *connection, sqlite3_stmt *statement, opsh_sql_effects *effects) {
    memset(effects, 0, sizeof *effects);
    if (sqlite3_stmt_isexplain(statement) || sqlite3_column_count(statement) > 0) return 0;
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
    int verifies = 0, other = 0, destroys = 0;
    size_t dropped = 0;
    // EXPLAIN's columns: addr, opcode, p1, p2, p3, p4, p5, comment.
    while ((code = sqlite3_step(program)) == SQLITE_ROW) {
        const char *opcode = (const char *)sqlite3_column_text(program, 1);
        if (!opcode) continue;
        int p1 = sqlite3_column_int(program, 2), p2 = sqlite3_column_int(program, 3);
        if (strcmp(opcode, "AutoCommit") == 0 || strcmp(opcode, "Savepoint") == 0) {
            effects->transaction_control = 1;
        } else if (strcmp(opcode, "SetCookie") == 0 && p2 == 1) {
            effects->schema_change = 1;
            if (p1 != 1) effects->schema_change_main = 1;
        } else if (strcmp(opcode, "DropTable") == 0 && p1 == 0) {
            const char *name = (const char *)sqlite3_column_text(program, 5);
            if (name) add_dropped(effects, &dropped, name);
        }
        if (strcmp(opcode, "Destroy") == 0) destroys = 1;
        if (strcmp(opcode, "Transaction") == 0) verifies = 1;
        if (!only_verifies_schema(opcode)) other = 1;
    }
    if (code != SQLITE_DONE) {
        sqlite3_finalize(program);
        opsh_sql_effects_free(effects);
        return -1;
    }
    sqlite3_finalize(program);
    // DROP VIEW compiles to DropTable too, but a view has no b-tree to
    // destroy (and no rows).
    if (!destroys) opsh_sql_effects_free(effects);
    effects->dormant_schema_change = verifies && !other && !effects->transaction_control;
    return 0;
}

void opsh_sql_effects_free(opsh_sql_effects *effects) {
    free(effects->dropped_tables);
    effects->dropped_tables = NULL;
}

int opsh_sql_is_transaction_control(sqlite3 *connection, sqlite3_stmt *statement) {
    opsh_sql_effects effects;
    if (opsh_sql_classify(connection, statement, &effects) != 0) return -1;
    int control = effects.transaction_control;
    opsh_sql_effects_free(&effects);
    return control;
}

int opsh_sql_set_defensive(sqlite3 *connection) {
    return sqlite3_db_config(connection, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
}
