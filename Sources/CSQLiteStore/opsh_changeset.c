// Changesets are made in opsh_changes.c; here they are inverted, walked and
// applied with SQLite's session extension, whose declarations are behind
// these two switches in sqlite3.h (the library is built with both:
// ARCHITECTURE.md, "Measured facts").
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "opsh_changeset.h"

int opsh_changeset_invert(int size, const void *bytes, int *inverted_size, void **inverted) {
    return sqlite3changeset_invert(size, bytes, inverted_size, inverted);
}

void opsh_changeset_free(void *bytes) {
    sqlite3_free(bytes);
}

int opsh_changeset_walk(int size, const void *bytes,
                        void (*each)(const char *table, int operation, void *context), void *context) {
    sqlite3_changeset_iter *iterator = NULL;
    int code = sqlite3changeset_start(&iterator, size, (void *)bytes);
    if (code != SQLITE_OK) return code;
    while (sqlite3changeset_next(iterator) == SQLITE_ROW) {
        const char *table = NULL;
        int columns = 0, operation = 0, indirect = 0;
        if (sqlite3changeset_op(iterator, &table, &columns, &operation, &indirect) == SQLITE_OK) {
            each(table, operation, context);
        }
    }
    return sqlite3changeset_finalize(iterator);
}

// MARK: Applying

/// A growing text of conflict lines.
typedef struct {
    char *text;
    size_t length, capacity;
    int count;
} conflict_list;

static void append(conflict_list *list, const char *format, ...) {
    char line[512];
    va_list arguments;
    va_start(arguments, format);
    int length = vsnprintf(line, sizeof line, format, arguments);
    va_end(arguments);
    if (length < 0) return;
    if ((size_t)length >= sizeof line) length = sizeof line - 1;
    if (list->length + (size_t)length + 1 > list->capacity) {
        size_t capacity = (list->capacity + (size_t)length + 1) * 2;
        char *grown = sqlite3_realloc64(list->text, capacity);
        if (!grown) return;
        list->text = grown;
        list->capacity = capacity;
    }
    memcpy(list->text + list->length, line, (size_t)length);
    list->length += (size_t)length;
    list->text[list->length] = 0;
}

/// A value as SQL shows it, shortened.
static void describe_value(sqlite3_value *value, char *out, size_t size) {
    if (!value) { snprintf(out, size, "?"); return; }
    switch (sqlite3_value_type(value)) {
    case SQLITE_INTEGER: snprintf(out, size, "%lld", sqlite3_value_int64(value)); break;
    case SQLITE_FLOAT: snprintf(out, size, "%.17g", sqlite3_value_double(value)); break;
    case SQLITE_NULL: snprintf(out, size, "NULL"); break;
    case SQLITE_BLOB: snprintf(out, size, "a BLOB of %d bytes", sqlite3_value_bytes(value)); break;
    default: {
        const char *text = (const char *)sqlite3_value_text(value);
        int length = sqlite3_value_bytes(value);
        if (length > 60) snprintf(out, size, "'%.57s…'", text ? text : "");
        else snprintf(out, size, "'%s'", text ? text : "");
    }
    }
}

static int on_conflict(void *context, int kind, sqlite3_changeset_iter *iterator) {
    conflict_list *list = context;
    list->count++;
    if (kind == SQLITE_CHANGESET_FOREIGN_KEY) {
        int broken = 0;
        sqlite3changeset_fk_conflicts(iterator, &broken);
        append(list, "%d foreign key(s) would be broken (a parent row is gone or a child row is left)\n", broken);
        return SQLITE_CHANGESET_OMIT;
    }
    if (list->count > 50) {
        if (list->count == 51) append(list, "(more rows; only the first 50 are listed)\n");
        return SQLITE_CHANGESET_OMIT;
    }
    const char *table = NULL;
    int columns = 0, operation = 0, indirect = 0;
    sqlite3changeset_op(iterator, &table, &columns, &operation, &indirect);
    unsigned char *primary = NULL;
    sqlite3changeset_pk(iterator, &primary, &columns);
    char key[256] = "";
    size_t used = 0;
    for (int column = 0; column < columns && used < sizeof key - 1; column++) {
        if (!primary || !primary[column]) continue;
        sqlite3_value *value = NULL;
        if (operation == SQLITE_INSERT) sqlite3changeset_new(iterator, column, &value);
        else sqlite3changeset_old(iterator, column, &value);
        char shown[96];
        describe_value(value, shown, sizeof shown);
        used += (size_t)snprintf(key + used, sizeof key - used, "%s%s", used ? ", " : "", shown);
    }
    const char *why;
    switch (kind) {
    case SQLITE_CHANGESET_DATA: why = "changed since"; break;
    case SQLITE_CHANGESET_NOTFOUND: why = "deleted since"; break;
    case SQLITE_CHANGESET_CONFLICT: why = "a row with this key was inserted since"; break;
    default: why = "would break a constraint"; break;
    }
    append(list, "%s (%s): %s\n", table ? table : "?", key, why);
    return SQLITE_CHANGESET_OMIT;
}

int opsh_changeset_apply(sqlite3 *connection, int size, const void *bytes,
                         int *conflict_count, char **conflicts) {
    conflict_list list = { NULL, 0, 0, 0 };
    *conflict_count = 0;
    *conflicts = NULL;
    // A savepoint of our own: sqlite3changeset_apply keeps what did not
    // conflict, and a partial change is worse than none.
    int code = sqlite3_exec(connection, "SAVEPOINT opsh_changeset_apply", NULL, NULL, NULL);
    if (code != SQLITE_OK) return code;
    code = sqlite3changeset_apply(connection, size, (void *)bytes, NULL, on_conflict, &list);
    if (code != SQLITE_OK || list.count > 0) {
        sqlite3_exec(connection, "ROLLBACK TO opsh_changeset_apply", NULL, NULL, NULL);
    }
    sqlite3_exec(connection, "RELEASE opsh_changeset_apply", NULL, NULL, NULL);
    *conflict_count = list.count;
    if (list.text) {
        // Drop the last newline.
        if (list.length > 0 && list.text[list.length - 1] == '\n') list.text[list.length - 1] = 0;
        *conflicts = list.text;
    }
    return code;
}
