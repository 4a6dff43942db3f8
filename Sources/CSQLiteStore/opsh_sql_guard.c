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

/// Appends `name` (its first `size` bytes) to a list of NUL-terminated
/// names that ends with an empty name; 0 when out of memory.
static int add_name(char **list, size_t *length, const char *name, size_t size) {
    char *grown = realloc(*list, *length + size + 2);
    if (!grown) return 0;
    memcpy(grown + *length, name, size);
    grown[*length + size] = 0;
    *length += size + 1;
    grown[*length] = 0;
    *list = grown;
    return 1;
}

/// The name in ParseSchema's `tbl_name='…' AND type!='trigger'` (SQLite's
/// %q: quotes doubled), added to `list`; 0 when out of memory.
static int add_parsed_table(char **list, size_t *length, const char *where) {
    static const char prefix[] = "tbl_name='";
    if (strncmp(where, prefix, sizeof prefix - 1) != 0) return 1;
    const char *quoted = where + sizeof prefix - 1;
    size_t size = strlen(quoted);
    char *name = malloc(size + 1);
    if (!name) return 0;
    size_t used = 0;
    for (const char *c = quoted; *c; c++) {
        if (*c == '\'' && c[1] == '\'') { name[used++] = '\''; c++; continue; }
        if (*c == '\'') break;
        name[used++] = *c;
    }
    int added = add_name(list, length, name, used);
    free(name);
    return added;
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
    int verifies = 0, other = 0, destroys = 0, out_of_memory = 0;
    int reads_main_schema = 0, reads_temp_schema_whole = 0, renames_table = 0;
    size_t dropped = 0, created = 0;
    // The text SQLite loaded into each register (String8), for VCreate.
    enum { registers = 256 };
    char *loaded[registers] = { 0 };
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
            if (name && !add_name(&effects->dropped_tables, &dropped, name, strlen(name))) out_of_memory = 1;
        } else if (strcmp(opcode, "String8") == 0 && p2 >= 0 && p2 < registers) {
            const char *value = (const char *)sqlite3_column_text(program, 5);
            free(loaded[p2]);
            loaded[p2] = value ? strdup(value) : NULL;
        } else if (strcmp(opcode, "ParseSchema") == 0) {
            const char *where = (const char *)sqlite3_column_text(program, 5);
            if (p1 == 0) reads_main_schema = 1;
            if (p1 == 1 && where && *where && !add_parsed_table(&effects->temp_tables_created, &created, where)) out_of_memory = 1;
            if (p1 == 1 && (!where || !*where)) reads_temp_schema_whole = 1;
        } else if (strcmp(opcode, "VCreate") == 0 && p1 == 1 && p2 >= 0 && p2 < registers && loaded[p2]) {
            if (!add_name(&effects->temp_tables_created, &created, loaded[p2], strlen(loaded[p2]))) out_of_memory = 1;
        } else if (strcmp(opcode, "Function") == 0 || strcmp(opcode, "PureFunc") == 0) {
            const char *function = (const char *)sqlite3_column_text(program, 5);
            if (function && strncmp(function, "sqlite_rename_table(", 20) == 0) renames_table = 1;
        }
        if (strcmp(opcode, "Destroy") == 0) destroys = 1;
        if (strcmp(opcode, "Transaction") == 0) verifies = 1;
        if (!only_verifies_schema(opcode)) other = 1;
    }
    for (int index = 0; index < registers; index++) free(loaded[index]);
    if (code != SQLITE_DONE || out_of_memory) {
        sqlite3_finalize(program);
        opsh_sql_effects_free(effects);
        return -1;
    }
    sqlite3_finalize(program);
    // DROP VIEW compiles to DropTable too, but a view has no b-tree to
    // destroy (and no rows).
    if (!destroys) {
        free(effects->dropped_tables);
        effects->dropped_tables = NULL;
    }
    effects->renames_temp_table = renames_table && reads_temp_schema_whole && !reads_main_schema;
    effects->dormant_schema_change = verifies && !other && !effects->transaction_control;
    return 0;
}

void opsh_sql_effects_free(opsh_sql_effects *effects) {
    free(effects->dropped_tables);
    effects->dropped_tables = NULL;
    free(effects->temp_tables_created);
    effects->temp_tables_created = NULL;
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
