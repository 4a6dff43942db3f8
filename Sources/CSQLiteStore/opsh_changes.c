// A writer connection's row changes (opsh_changes.h): counted from
// SQLite's preupdate hook, and the first version of each changed row kept
// for the transaction's changeset while asked.
//
// Debian's libsqlite3 is built with ENABLE_PREUPDATE_HOOK (ARCHITECTURE.md,
// "Measured facts"); GRDB does not set the hook unless built with
// SQLITE_ENABLE_PREUPDATE_HOOK=1, which opsh's build does not do.
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "opsh_changes.h"

// MARK: Buffers and the changeset's record format

typedef struct {
    unsigned char *bytes;
    size_t size, capacity;
    int failed;
} buffer;

static void buffer_append(buffer *b, const void *data, size_t count) {
    if (b->failed) return;
    if (b->size + count > b->capacity) {
        size_t capacity = (b->size + count) * 2 + 64;
        unsigned char *grown = realloc(b->bytes, capacity);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->bytes = grown;
        b->capacity = capacity;
    }
    if (count) memcpy(b->bytes + b->size, data, count);
    b->size += count;
}

static void buffer_byte(buffer *b, unsigned char byte) { buffer_append(b, &byte, 1); }

/// SQLite's varint, as the changeset format uses for lengths.
static void buffer_varint(buffer *b, uint64_t value) {
    unsigned char reversed[10];
    int count = 0;
    do {
        reversed[count++] = (unsigned char)((value & 0x7f) | 0x80);
        value >>= 7;
    } while (value != 0 && count < 9);
    reversed[0] &= 0x7f;
    for (int index = count - 1; index >= 0; index--) buffer_byte(b, reversed[index]);
}

static void buffer_int64(buffer *b, uint64_t value) {
    unsigned char bytes[8];
    for (int index = 0; index < 8; index++) bytes[index] = (unsigned char)(value >> (56 - 8 * index));
    buffer_append(b, bytes, 8);
}

/// One field of a changeset record: its type byte, then the value
/// (SQLite's session format: 1 integer, 2 real, 3 text, 4 blob, 5 NULL;
/// 0 undefined when `value` is NULL).
static void buffer_value(buffer *b, sqlite3_value *value) {
    if (!value) {
        buffer_byte(b, 0);
        return;
    }
    int type = sqlite3_value_type(value);
    buffer_byte(b, (unsigned char)type);
    switch (type) {
    case SQLITE_INTEGER:
        buffer_int64(b, (uint64_t)sqlite3_value_int64(value));
        break;
    case SQLITE_FLOAT: {
        double real = sqlite3_value_double(value);
        uint64_t bits;
        memcpy(&bits, &real, 8);
        buffer_int64(b, bits);
        break;
    }
    case SQLITE_TEXT:
    case SQLITE_BLOB: {
        const void *data = type == SQLITE_TEXT ? (const void *)sqlite3_value_text(value) : sqlite3_value_blob(value);
        int count = sqlite3_value_bytes(value);
        buffer_varint(b, (uint64_t)count);
        buffer_append(b, data, (size_t)count);
        break;
    }
    default:
        break;
    }
}

/// The same for column `index` of a statement's current row.
static void buffer_column(buffer *b, sqlite3_stmt *statement, int index) {
    int type = sqlite3_column_type(statement, index);
    buffer_byte(b, (unsigned char)type);
    switch (type) {
    case SQLITE_INTEGER:
        buffer_int64(b, (uint64_t)sqlite3_column_int64(statement, index));
        break;
    case SQLITE_FLOAT: {
        double real = sqlite3_column_double(statement, index);
        uint64_t bits;
        memcpy(&bits, &real, 8);
        buffer_int64(b, bits);
        break;
    }
    case SQLITE_TEXT:
    case SQLITE_BLOB: {
        const void *data = type == SQLITE_TEXT ? (const void *)sqlite3_column_text(statement, index)
                                               : sqlite3_column_blob(statement, index);
        int count = sqlite3_column_bytes(statement, index);
        buffer_varint(b, (uint64_t)count);
        buffer_append(b, data, (size_t)count);
        break;
    }
    default:
        break;
    }
}

static const unsigned char *read_varint(const unsigned char *p, uint64_t *value) {
    uint64_t result = 0;
    for (int index = 0; index < 8; index++) {
        result = (result << 7) | (p[index] & 0x7f);
        if (!(p[index] & 0x80)) {
            *value = result;
            return p + index + 1;
        }
    }
    *value = (result << 8) | p[8];
    return p + 9;
}

static uint64_t read_int64(const unsigned char *p) {
    uint64_t value = 0;
    for (int index = 0; index < 8; index++) value = (value << 8) | p[index];
    return value;
}

/// Binds the field at `p` to parameter `index`; returns the next field.
static const unsigned char *bind_field(sqlite3_stmt *statement, int index, const unsigned char *p) {
    int type = *p++;
    switch (type) {
    case SQLITE_INTEGER:
        sqlite3_bind_int64(statement, index, (sqlite3_int64)read_int64(p));
        return p + 8;
    case SQLITE_FLOAT: {
        uint64_t bits = read_int64(p);
        double real;
        memcpy(&real, &bits, 8);
        sqlite3_bind_double(statement, index, real);
        return p + 8;
    }
    case SQLITE_TEXT:
    case SQLITE_BLOB: {
        uint64_t count = 0;
        p = read_varint(p, &count);
        if (type == SQLITE_TEXT) sqlite3_bind_text(statement, index, (const char *)p, (int)count, SQLITE_TRANSIENT);
        else sqlite3_bind_blob(statement, index, p, (int)count, SQLITE_TRANSIENT);
        return p + count;
    }
    default:
        sqlite3_bind_null(statement, index);
        return p;
    }
}

// MARK: Kept rows

/// A changed row: its key (the PRIMARY KEY's fields) and, when it existed
/// before the recording's first change to it, the whole row then.
typedef struct kept_row {
    struct kept_row *next;
    uint32_t hash;
    size_t key_size;
    /// SIZE_MAX: the row did not exist then (it was inserted).
    size_t original_size;
    /// The key's bytes, then the original's.
    unsigned char data[];
} kept_row;

typedef struct kept_table {
    struct kept_table *next;
    char *name;
    /// -1: its rows cannot be kept (see opsh_changes_unrecorded).
    int columns;
    /// Per column: 0, or its place in the PRIMARY KEY (1, 2 …), as
    /// pragma_table_info says and as changesets carry it.
    unsigned char *primary_key;
    kept_row **buckets;
    size_t bucket_count, row_count;
} kept_table;

struct opsh_changes {
    sqlite3 *connection;
    /// Taken by the hook for every changed row, and by whoever reads the
    /// counts (from any thread). A flag rather than a pthread mutex: the
    /// mutex's lock and unlock were a third of the hook's own cost in an
    /// insert loop (callgrind: about 55 of its 190 instructions a row); the
    /// flag costs a few. A waiter yields: waiting is rare (the counts read
    /// from one thread while another writes).
    atomic_flag lock;
    /// SQLite's name of the connection's `main` schema, once a change
    /// there has been seen: every later change of `main` is told by this
    /// pointer instead of a string compare. It is SQLite's constant "main"
    /// for the connection's lifetime; no other schema may be named so.
    const char *main_name;
    opsh_change_count *counts;
    int count, capacity, last;
    int recording;
    /// Out of memory while keeping rows: no changeset can be made.
    int record_failed;
    kept_table *tables;
    char *unrecorded;
};

static void lock_changes(opsh_changes *changes) {
    while (atomic_flag_test_and_set_explicit(&changes->lock, memory_order_acquire)) sched_yield();
}

static void unlock_changes(opsh_changes *changes) {
    atomic_flag_clear_explicit(&changes->lock, memory_order_release);
}

static uint32_t hash_bytes(const unsigned char *bytes, size_t count) {
    uint32_t hash = 2166136261u;
    for (size_t index = 0; index < count; index++) hash = (hash ^ bytes[index]) * 16777619u;
    return hash;
}

static void note_unrecorded(opsh_changes *changes, const char *table) {
    if (!changes->unrecorded) changes->unrecorded = strdup(table);
}

static void free_rows(kept_table *table) {
    for (size_t index = 0; index < table->bucket_count; index++) {
        kept_row *row = table->buckets[index];
        while (row) {
            kept_row *next = row->next;
            free(row);
            row = next;
        }
    }
    free(table->buckets);
    table->buckets = NULL;
    table->bucket_count = table->row_count = 0;
}

static void free_tables(opsh_changes *changes) {
    kept_table *table = changes->tables;
    while (table) {
        kept_table *next = table->next;
        free_rows(table);
        free(table->name);
        free(table->primary_key);
        free(table);
        table = next;
    }
    changes->tables = NULL;
    free(changes->unrecorded);
    changes->unrecorded = NULL;
    changes->record_failed = 0;
}

/// The table's columns and PRIMARY KEY, read on its first change (the
/// session extension reads them from within the hook the same way).
static kept_table *kept_table_for(opsh_changes *changes, sqlite3 *db, const char *name) {
    for (kept_table *table = changes->tables; table; table = table->next) {
        if (strcmp(table->name, name) == 0) return table;
    }
    kept_table *table = calloc(1, sizeof *table);
    if (!table || !(table->name = strdup(name))) {
        free(table);
        changes->record_failed = 1;
        return NULL;
    }
    table->columns = sqlite3_preupdate_count(db);
    table->primary_key = calloc((size_t)(table->columns > 0 ? table->columns : 1), 1);
    if (!table->primary_key) {
        free(table->name);
        free(table);
        changes->record_failed = 1;
        return NULL;
    }
    sqlite3_stmt *info = NULL;
    int found = 0, keyed = 0;
    if (sqlite3_prepare_v2(db, "SELECT pk FROM pragma_table_info(?1, 'main') ORDER BY cid", -1, &info, NULL) == SQLITE_OK) {
        sqlite3_bind_text(info, 1, name, -1, SQLITE_TRANSIENT);
        while (sqlite3_step(info) == SQLITE_ROW) {
            int place = sqlite3_column_int(info, 0);
            if (found < table->columns) table->primary_key[found] = (unsigned char)place;
            if (place > 0) keyed = 1;
            found++;
        }
    }
    sqlite3_finalize(info);
    // No PRIMARY KEY (a row has no identity the changeset can name), or
    // columns the pragma does not list (generated ones): not kept.
    if (!keyed || found != table->columns) {
        table->columns = -1;
        note_unrecorded(changes, name);
    }
    table->next = changes->tables;
    changes->tables = table;
    return table;
}

typedef int (*value_getter)(sqlite3 *, int, sqlite3_value **);

static void key_of(kept_table *table, sqlite3 *db, value_getter get, buffer *key) {
    for (int column = 0; column < table->columns; column++) {
        if (!table->primary_key[column]) continue;
        sqlite3_value *value = NULL;
        get(db, column, &value);
        buffer_value(key, value);
    }
}

static kept_row *find_row(kept_table *table, const buffer *key, uint32_t hash) {
    if (!table->bucket_count) return NULL;
    for (kept_row *row = table->buckets[hash % table->bucket_count]; row; row = row->next) {
        if (row->hash == hash && row->key_size == key->size && memcmp(row->data, key->bytes, key->size) == 0) return row;
    }
    return NULL;
}

static int grow_buckets(kept_table *table) {
    size_t count = table->bucket_count ? table->bucket_count * 2 : 256;
    kept_row **buckets = calloc(count, sizeof *buckets);
    if (!buckets) return 0;
    for (size_t index = 0; index < table->bucket_count; index++) {
        kept_row *row = table->buckets[index];
        while (row) {
            kept_row *next = row->next;
            row->next = buckets[row->hash % count];
            buckets[row->hash % count] = row;
            row = next;
        }
    }
    free(table->buckets);
    table->buckets = buckets;
    table->bucket_count = count;
    return 1;
}

/// Keeps `key`'s row as it is before this change (`original`, NULL: it did
/// not exist), unless an earlier change kept it already.
static void keep_row(opsh_changes *changes, kept_table *table, const buffer *key, const buffer *original) {
    uint32_t hash = hash_bytes(key->bytes, key->size);
    if (find_row(table, key, hash)) return;
    if (table->row_count >= table->bucket_count && !grow_buckets(table)) {
        changes->record_failed = 1;
        return;
    }
    size_t original_size = original ? original->size : 0;
    kept_row *row = malloc(sizeof *row + key->size + original_size);
    if (!row) {
        changes->record_failed = 1;
        return;
    }
    row->hash = hash;
    row->key_size = key->size;
    row->original_size = original ? original->size : SIZE_MAX;
    memcpy(row->data, key->bytes, key->size);
    if (original_size) memcpy(row->data + key->size, original->bytes, original_size);
    size_t bucket = hash % table->bucket_count;
    row->next = table->buckets[bucket];
    table->buckets[bucket] = row;
    table->row_count++;
}

static void keep_change(opsh_changes *changes, sqlite3 *db, int operation, const char *name) {
    kept_table *table = kept_table_for(changes, db, name);
    if (!table || table->columns < 0) return;
    if (sqlite3_preupdate_count(db) != table->columns) {
        // ALTER TABLE … ADD COLUMN in the transaction: a schema change,
        // which no changeset holds (the caller says so).
        free_rows(table);
        table->columns = -1;
        note_unrecorded(changes, name);
        return;
    }
    buffer key = {0}, original = {0};
    if (operation == SQLITE_INSERT) {
        key_of(table, db, sqlite3_preupdate_new, &key);
        if (!key.failed) keep_row(changes, table, &key, NULL);
    } else {
        key_of(table, db, sqlite3_preupdate_old, &key);
        for (int column = 0; column < table->columns; column++) {
            sqlite3_value *value = NULL;
            sqlite3_preupdate_old(db, column, &value);
            buffer_value(&original, value);
        }
        if (!key.failed && !original.failed) keep_row(changes, table, &key, &original);
        if (operation == SQLITE_UPDATE) {
            // A changed key: the row under the new key did not exist before
            // (a row deleted to make room for it was kept by its DELETE).
            buffer moved = {0};
            key_of(table, db, sqlite3_preupdate_new, &moved);
            if (!moved.failed && (moved.size != key.size || memcmp(moved.bytes, key.bytes, key.size) != 0)) {
                keep_row(changes, table, &moved, NULL);
            }
            free(moved.bytes);
        }
    }
    if (key.failed || original.failed) changes->record_failed = 1;
    free(key.bytes);
    free(original.bytes);
}

// MARK: Counting

static opsh_change_count *count_for(opsh_changes *changes, const char *table, int temporary) {
    if (changes->last < changes->count) {
        opsh_change_count *last = &changes->counts[changes->last];
        if (last->temporary == temporary && strcmp(last->table, table) == 0) return last;
    }
    for (int index = 0; index < changes->count; index++) {
        opsh_change_count *entry = &changes->counts[index];
        if (entry->temporary == temporary && strcmp(entry->table, table) == 0) {
            changes->last = index;
            return entry;
        }
    }
    if (changes->count == changes->capacity) {
        int capacity = changes->capacity ? changes->capacity * 2 : 8;
        opsh_change_count *grown = realloc(changes->counts, sizeof *grown * (size_t)capacity);
        if (!grown) return NULL;
        changes->counts = grown;
        changes->capacity = capacity;
    }
    char *name = strdup(table);
    if (!name) return NULL;
    opsh_change_count *entry = &changes->counts[changes->count];
    memset(entry, 0, sizeof *entry);
    entry->table = name;
    entry->temporary = temporary;
    changes->last = changes->count++;
    return entry;
}

static void on_preupdate(void *context, sqlite3 *db, int operation, const char *database, const char *table,
                         sqlite3_int64 key, sqlite3_int64 new_key) {
    (void)key;
    (void)new_key;
    opsh_changes *changes = context;
    if (!database || !table) return;
    lock_changes(changes);
    int temporary = database != changes->main_name;
    if (temporary && strcmp(database, "main") == 0) {
        changes->main_name = database;
        temporary = 0;
    }
    opsh_change_count *entry = count_for(changes, table, temporary);
    if (entry) {
        switch (operation) {
        case SQLITE_INSERT: entry->inserted++; break;
        case SQLITE_UPDATE: entry->updated++; break;
        case SQLITE_DELETE: entry->deleted++; break;
        }
    }
    if (changes->recording && !temporary && !changes->record_failed) keep_change(changes, db, operation, table);
    unlock_changes(changes);
}

opsh_changes *opsh_changes_install(sqlite3 *connection) {
    opsh_changes *changes = calloc(1, sizeof *changes);
    if (!changes) return NULL;
    changes->connection = connection;
    atomic_flag_clear(&changes->lock);
    sqlite3_preupdate_hook(connection, on_preupdate, changes);
    return changes;
}

void opsh_changes_uninstall(opsh_changes *changes) {
    if (changes && changes->connection) sqlite3_preupdate_hook(changes->connection, NULL, NULL);
}

static void clear_counts(opsh_changes *changes) {
    for (int index = 0; index < changes->count; index++) free(changes->counts[index].table);
    changes->count = 0;
    changes->last = 0;
}

void opsh_changes_free(opsh_changes *changes) {
    if (!changes) return;
    clear_counts(changes);
    free(changes->counts);
    free_tables(changes);
    free(changes);
}

int opsh_changes_read(opsh_changes *changes, opsh_change_count **counts) {
    lock_changes(changes);
    int count = 0;
    opsh_change_count *copy = calloc((size_t)(changes->count ? changes->count : 1), sizeof *copy);
    if (copy) {
        for (int index = 0; index < changes->count; index++) {
            copy[count] = changes->counts[index];
            copy[count].table = strdup(changes->counts[index].table);
            if (copy[count].table) count++;
        }
    }
    unlock_changes(changes);
    *counts = copy;
    return count;
}

void opsh_changes_free_counts(opsh_change_count *counts, int count) {
    if (!counts) return;
    for (int index = 0; index < count; index++) free(counts[index].table);
    free(counts);
}

void opsh_changes_clear(opsh_changes *changes) {
    lock_changes(changes);
    clear_counts(changes);
    unlock_changes(changes);
}

void opsh_changes_add(opsh_changes *changes, const char *table, int temporary,
                      int64_t inserted, int64_t updated, int64_t deleted) {
    lock_changes(changes);
    opsh_change_count *entry = count_for(changes, table, temporary);
    if (entry) {
        entry->inserted += inserted;
        entry->updated += updated;
        entry->deleted += deleted;
    }
    unlock_changes(changes);
}

// MARK: Recording

int opsh_changes_record(opsh_changes *changes) {
    lock_changes(changes);
    free_tables(changes);
    changes->recording = 1;
    unlock_changes(changes);
    return SQLITE_OK;
}

void opsh_changes_stop_recording(opsh_changes *changes) {
    lock_changes(changes);
    changes->recording = 0;
    free_tables(changes);
    unlock_changes(changes);
}

int opsh_changes_is_recording(opsh_changes *changes) {
    lock_changes(changes);
    int recording = changes->recording;
    unlock_changes(changes);
    return recording;
}

const char *opsh_changes_unrecorded(opsh_changes *changes) {
    lock_changes(changes);
    const char *name = changes->unrecorded;
    unlock_changes(changes);
    return name;
}

static void append_identifier(buffer *b, const char *name) {
    buffer_byte(b, '"');
    for (const char *p = name; *p; p++) {
        if (*p == '"') buffer_byte(b, '"');
        buffer_byte(b, (unsigned char)*p);
    }
    buffer_byte(b, '"');
}

/// `SELECT "a", "b", … FROM main."t" WHERE "key1" IS ?1 AND …`, the
/// columns in their order; NULL when the table is not as it was kept.
static sqlite3_stmt *current_row_statement(sqlite3 *db, kept_table *table) {
    sqlite3_stmt *info = NULL;
    if (sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info(?1, 'main') ORDER BY cid", -1, &info, NULL) != SQLITE_OK) {
        sqlite3_finalize(info);
        return NULL;
    }
    sqlite3_bind_text(info, 1, table->name, -1, SQLITE_TRANSIENT);
    buffer sql = {0}, where = {0};
    buffer_append(&sql, "SELECT ", 7);
    int column = 0, parameter = 0;
    while (sqlite3_step(info) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(info, 0);
        if (!name || column >= table->columns) {
            column = -1;
            break;
        }
        if (column > 0) buffer_append(&sql, ", ", 2);
        append_identifier(&sql, name);
        if (table->primary_key[column]) {
            char placeholder[24];
            int length = snprintf(placeholder, sizeof placeholder, " IS ?%d", ++parameter);
            if (where.size) buffer_append(&where, " AND ", 5);
            append_identifier(&where, name);
            buffer_append(&where, placeholder, (size_t)length);
        }
        column++;
    }
    sqlite3_finalize(info);
    sqlite3_stmt *statement = NULL;
    if (column == table->columns) {
        buffer_append(&sql, " FROM main.", 11);
        append_identifier(&sql, table->name);
        buffer_append(&sql, " WHERE ", 7);
        buffer_append(&sql, where.bytes, where.size);
        buffer_byte(&sql, 0);
        if (!sql.failed && !where.failed && sqlite3_prepare_v2(db, (const char *)sql.bytes, -1, &statement, NULL) != SQLITE_OK) {
            sqlite3_finalize(statement);
            statement = NULL;
        }
    }
    free(sql.bytes);
    free(where.bytes);
    return statement;
}

/// The changes of one table: each kept row against the row as it is now.
static int table_changes(sqlite3 *db, kept_table *table, buffer *out) {
    sqlite3_stmt *current = current_row_statement(db, table);
    if (!current) return SQLITE_SCHEMA;
    int header = 0, code = SQLITE_OK;
    buffer now = {0};
    for (size_t bucket = 0; bucket < table->bucket_count && code == SQLITE_OK; bucket++) {
        for (kept_row *row = table->buckets[bucket]; row && code == SQLITE_OK; row = row->next) {
            sqlite3_reset(current);
            const unsigned char *field = row->data;
            for (int parameter = 1; field < row->data + row->key_size; parameter++) field = bind_field(current, parameter, field);
            int step = sqlite3_step(current);
            if (step != SQLITE_ROW && step != SQLITE_DONE) {
                code = step;
                break;
            }
            int exists = step == SQLITE_ROW, existed = row->original_size != SIZE_MAX;
            const unsigned char *original = row->data + row->key_size;
            now.size = 0;
            if (exists) for (int column = 0; column < table->columns; column++) buffer_column(&now, current, column);
            if (!exists && !existed) continue;
            if (exists && existed && now.size == row->original_size && memcmp(now.bytes, original, now.size) == 0) continue;
            if (!header) {
                buffer_byte(out, 'T');
                buffer_varint(out, (uint64_t)table->columns);
                buffer_append(out, table->primary_key, (size_t)table->columns);
                buffer_append(out, table->name, strlen(table->name) + 1);
                header = 1;
            }
            if (!existed) {
                buffer_byte(out, SQLITE_INSERT);
                buffer_byte(out, 0);
                buffer_append(out, now.bytes, now.size);
            } else if (!exists) {
                buffer_byte(out, SQLITE_DELETE);
                buffer_byte(out, 0);
                buffer_append(out, original, row->original_size);
            } else {
                // The whole row on both sides, so that applying it (or its
                // inverse, undo()) refuses a row changed in any column.
                buffer_byte(out, SQLITE_UPDATE);
                buffer_byte(out, 0);
                buffer_append(out, original, row->original_size);
                for (int column = 0; column < table->columns; column++) {
                    if (table->primary_key[column]) buffer_byte(out, 0);
                    else buffer_column(out, current, column);
                }
            }
        }
    }
    free(now.bytes);
    sqlite3_finalize(current);
    if (now.failed) code = SQLITE_NOMEM;
    return code;
}

int opsh_changes_changeset(opsh_changes *changes, int *size, void **bytes) {
    *size = 0;
    *bytes = NULL;
    lock_changes(changes);
    int code = changes->record_failed ? SQLITE_NOMEM : SQLITE_OK;
    buffer out = {0};
    for (kept_table *table = changes->tables; table && code == SQLITE_OK; table = table->next) {
        if (table->columns < 0 || table->row_count == 0) continue;
        code = table_changes(changes->connection, table, &out);
        if (code == SQLITE_SCHEMA) {
            // Dropped or altered since: a schema change the caller reports.
            note_unrecorded(changes, table->name);
            code = SQLITE_OK;
        }
    }
    unlock_changes(changes);
    if (out.failed && code == SQLITE_OK) code = SQLITE_NOMEM;
    if (code == SQLITE_OK && out.size > 0) {
        *bytes = sqlite3_malloc64(out.size);
        if (*bytes) {
            memcpy(*bytes, out.bytes, out.size);
            *size = (int)out.size;
        } else {
            code = SQLITE_NOMEM;
        }
    }
    free(out.bytes);
    return code;
}
