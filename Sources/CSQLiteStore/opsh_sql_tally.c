#include <sqlite3.h>
#include "opsh_sql_tally.h"
#include <stdlib.h>
#include <string.h>

opsh_sql_tally *opsh_sql_tally_new(void) { return calloc(1, sizeof(opsh_sql_tally)); }

void opsh_sql_tally_clear(opsh_sql_tally *tally) {
    for (int i = 0; i < tally->count; i++) free(tally->entries[i].table);
    tally->count = 0;
    tally->last = 0;
}

void opsh_sql_tally_free(opsh_sql_tally *tally) {
    if (!tally) return;
    opsh_sql_tally_clear(tally);
    free(tally->entries);
    free(tally);
}

static opsh_sql_tally_entry *entry_for(opsh_sql_tally *tally, const char *table) {
    if (tally->last < tally->count && strcmp(tally->entries[tally->last].table, table) == 0) {
        return &tally->entries[tally->last];
    }
    for (int i = 0; i < tally->count; i++) {
        if (strcmp(tally->entries[i].table, table) == 0) {
            tally->last = i;
            return &tally->entries[i];
        }
    }
    if (tally->count == tally->capacity) {
        int capacity = tally->capacity ? tally->capacity * 2 : 8;
        opsh_sql_tally_entry *grown = realloc(tally->entries, sizeof(opsh_sql_tally_entry) * (size_t)capacity);
        if (!grown) return NULL;
        tally->entries = grown;
        tally->capacity = capacity;
    }
    char *name = strdup(table);
    if (!name) return NULL;
    opsh_sql_tally_entry *entry = &tally->entries[tally->count];
    memset(entry, 0, sizeof *entry);
    entry->table = name;
    tally->last = tally->count++;
    return entry;
}

void opsh_sql_tally_add(opsh_sql_tally *tally, const char *table, int64_t inserted, int64_t updated, int64_t deleted) {
    opsh_sql_tally_entry *entry = entry_for(tally, table);
    if (!entry) return;
    entry->inserted += inserted;
    entry->updated += updated;
    entry->deleted += deleted;
}

static void changed(void *context, int operation, const char *database, const char *table, sqlite3_int64 rowid) {
    (void)rowid;
    if (!database || !table || strcmp(database, "main") != 0) return;
    opsh_sql_tally_entry *entry = entry_for((opsh_sql_tally *)context, table);
    if (!entry) return;
    switch (operation) {
    case SQLITE_INSERT: entry->inserted++; break;
    case SQLITE_UPDATE: entry->updated++; break;
    case SQLITE_DELETE: entry->deleted++; break;
    }
}

void opsh_sql_tally_arm(opsh_sql_tally *tally, sqlite3 *connection) {
    if (!tally) return;
    tally->connection = connection;
    sqlite3_update_hook(connection, changed, tally);
}

void opsh_sql_tally_disarm(opsh_sql_tally *tally, sqlite3 *connection) {
    if (tally) sqlite3_update_hook(connection, NULL, NULL);
}

// MARK: The session's route (opsh_session_route.h)

#include "opsh_session_route.h"

opsh_session_route *opsh_session_route_new(void) { return calloc(1, sizeof(opsh_session_route)); }
void opsh_session_route_free(opsh_session_route *route) { free(route); }
