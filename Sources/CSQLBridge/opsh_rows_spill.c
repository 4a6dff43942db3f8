#include <sqlite3.h>
#include "opsh_rows_spill.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

const int opsh_rows_never_overdue = 0;

// The copy's SQL: its columns have no declared type (no affinity), so
// every value is stored and read back as the type it was read with.
static char *copy_sql(const char *format, const char *column_format, const char *separator, int columns, const char *end) {
    size_t capacity = strlen(format) + (size_t)columns * 16 + strlen(end) + 1;
    char *sql = malloc(capacity);
    if (!sql) return NULL;
    size_t length = (size_t)snprintf(sql, capacity, "%s", format);
    for (int column = 0; column < columns; column++)
        length += (size_t)snprintf(sql + length, capacity - length, column_format, column ? separator : "", column);
    snprintf(sql + length, capacity - length, "%s", end);
    return sql;
}

// Opens `filename` (":memory:", or "" for a temporary file), runs
// `setup` then `CREATE TABLE <table>(c0, c1, …)<end>`, and prepares the
// INSERT of one row into it. 0 (with *db and *insert left for the caller
// to close) when any step fails.
static int open_copy_table(const char *filename, const char *setup, const char *table, int columns, const char *end,
                           sqlite3 **db, sqlite3_stmt **insert) {
    char head[96], into[96];
    snprintf(head, sizeof head, "%sCREATE TABLE %s(", setup, table);
    snprintf(into, sizeof into, "INSERT INTO %s VALUES (", table);
    char *create = copy_sql(head, "%sc%d", ", ", columns, end);
    char *insert_sql = copy_sql(into, "%s?", ", ", columns, ")");
    int ok = create && insert_sql
        && sqlite3_open_v2(filename, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK
        && sqlite3_exec(*db, create, NULL, NULL, NULL) == SQLITE_OK
        && sqlite3_prepare_v2(*db, insert_sql, -1, insert, NULL) == SQLITE_OK;
    free(create);
    free(insert_sql);
    return ok;
}

static size_t file_size(const char *path) {
    struct stat status;
    return path && *path && stat(path, &status) == 0 ? (size_t)status.st_size : 0;
}

// Twice the database the statement reads (its file and WAL), at least
// OPSH_ROWS_COPY_LEAST_MOST (opsh_rows_spill.h).
static size_t copy_most(sqlite3 *reading) {
    sqlite3_filename file = sqlite3_db_filename(reading, "main");
    size_t database = file ? file_size(file) + file_size(sqlite3_filename_wal(file)) : 0;
    return 2 * database > OPSH_ROWS_COPY_LEAST_MOST ? 2 * database : OPSH_ROWS_COPY_LEAST_MOST;
}

void opsh_rows_origin_take(lua_State *L, int level, opsh_rows_origin *origin) {
    lua_Debug frame;
    origin->line = 0;
    if (lua_getstack(L, level, &frame) && lua_getinfo(L, "Sl", &frame) && frame.currentline > 0) {
        memcpy(origin->source, frame.short_src, sizeof origin->source);
        origin->line = frame.currentline;
    }
}

// Says, once a loop is copied, that it keeps its snapshot (`why`: what
// happened and why), where it began (else where its row was asked for:
// level 1 is the caller of the loop's iterator) and what that costs.
static void note_kept_snapshot(lua_State *L, const opsh_sql_route *route, const opsh_rows_origin *origin, const char *why) {
    if (!route->note) return;
    opsh_rows_origin asked;
    if (!origin || origin->line <= 0) {
        opsh_rows_origin_take(L, 1, &asked);
        origin = &asked;
    }
    char where[LUA_IDSIZE + 32] = "";
    if (origin->line > 0) snprintf(where, sizeof where, " at %s:%d", origin->source, origin->line);
    char text[512];
    snprintf(text, sizeof text, "a slow db.rows loop%s %s: it keeps its read snapshot, and the WAL, until it ends", where, why);
    route->note(route->note_context, text);
}

// The note of a copy abandoned: `copy`'s error, read as it failed.
static void note_copy_abandoned(lua_State *L, const opsh_sql_route *route, const opsh_rows_origin *origin, const char *error) {
    char why[256];
    snprintf(why, sizeof why, "could not copy its rest aside (%s)", error);
    note_kept_snapshot(L, route, origin, why);
}

static int spill_failed(lua_State *L, sqlite3_stmt **slot, opsh_sql_route *route, sqlite3 *failing, sqlite3 *copy, sqlite3_stmt *insert) {
    sqlite3_stmt *source = slot[0];
    route->failure_text(L, failing ? sqlite3_errmsg(failing) : "out of memory", sqlite3_sql(source));
    sqlite3_finalize(insert);
    sqlite3_close_v2(copy);
    slot[0] = NULL;
    opsh_sql_reader_finalize_cursor(route->session->reader, source);
    return OPSH_ROWS_SPILL_FAILED;
}

// The rows stepped out of the loop's statement since the copy's last
// commit, each value a type byte and its bytes: a write that fails takes
// them from the statement, and only these give them back (28c).
typedef struct {
    unsigned char *bytes;
    size_t length, capacity;
} held_rows;

// Room for `size` more held bytes (NULL when memory ran out): one check a
// value, the copy's loop being the hot part of a slow loop's copy.
static inline unsigned char *held_room(held_rows *held, size_t size) {
    if (__builtin_expect(held->capacity - held->length < size, 0)) {
        size_t capacity = held->capacity ? held->capacity : 64 << 10;
        while (capacity - held->length < size) capacity *= 2;
        unsigned char *grown = realloc(held->bytes, capacity);
        if (!grown) return NULL;
        held->bytes = grown;
        held->capacity = capacity;
    }
    return held->bytes + held->length;
}

// Holds `value` (of `type`, already bound to the copy's insert, which
// copied it) and returns the bytes the copy counts for it (its text's or
// BLOB's, 8 for a number), or 0 when memory ran out. Read through the
// value, not the statement's column calls: a text's bytes come as they
// are, in UTF-8 (its length asked first, sqlite3_value_bytes converts),
// without the copy sqlite3_value_text makes to end them with a NUL.
static inline size_t hold_value(held_rows *held, sqlite3_value *value, int type) {
    unsigned char *at;
    if (type == SQLITE_INTEGER || type == SQLITE_FLOAT) {
        if (!(at = held_room(held, 9))) return 0;
        if (type == SQLITE_INTEGER) {
            sqlite3_int64 integer = sqlite3_value_int64(value);
            memcpy(at + 1, &integer, 8);
        } else {
            double real = sqlite3_value_double(value);
            memcpy(at + 1, &real, 8);
        }
        at[0] = (unsigned char)type;
        held->length += 9;
        return 8;
    }
    if (type == SQLITE_TEXT || type == SQLITE_BLOB) {
        size_t size = (size_t)sqlite3_value_bytes(value);
        const void *data = sqlite3_value_blob(value);
        if ((!data && size) || !(at = held_room(held, 1 + sizeof size + size))) return 0;
        at[0] = (unsigned char)type;
        memcpy(at + 1, &size, sizeof size);
        if (size) memcpy(at + 1 + sizeof size, data, size);
        held->length += 1 + sizeof size + size;
        return size ? size : 8;
    }
    if (!(at = held_room(held, 1))) return 0;
    at[0] = SQLITE_NULL;
    held->length += 1;
    return 8;
}

// The held rows in a database in memory (one batch at most), read back in
// their order by the statement returned (NULL when memory ran out); its
// connection closes with that statement.
static sqlite3_stmt *held_rows_statement(const held_rows *held, int columns) {
    sqlite3 *memory = NULL;
    sqlite3_stmt *insert = NULL, *rows = NULL;
    int ok = open_copy_table(":memory:", "", "held", columns, "); BEGIN", &memory, &insert);
    for (size_t at = 0; ok && at < held->length;) {
        for (int column = 1; column <= columns; column++) {
            unsigned char type = held->bytes[at++];
            if (type == SQLITE_INTEGER) {
                sqlite3_int64 integer;
                memcpy(&integer, held->bytes + at, sizeof integer);
                at += sizeof integer;
                sqlite3_bind_int64(insert, column, integer);
            } else if (type == SQLITE_FLOAT) {
                double real;
                memcpy(&real, held->bytes + at, sizeof real);
                at += sizeof real;
                sqlite3_bind_double(insert, column, real);
            } else if (type == SQLITE_TEXT || type == SQLITE_BLOB) {
                size_t size;
                memcpy(&size, held->bytes + at, sizeof size);
                at += sizeof size;
                const void *data = held->bytes + at;
                at += size;
                if (type == SQLITE_TEXT) sqlite3_bind_text64(insert, column, data, size, SQLITE_STATIC, SQLITE_UTF8);
                else sqlite3_bind_blob64(insert, column, data, size, SQLITE_STATIC);
            } else {
                sqlite3_bind_null(insert, column);
            }
        }
        ok = sqlite3_step(insert) == SQLITE_DONE && sqlite3_reset(insert) == SQLITE_OK;
    }
    ok = ok && sqlite3_exec(memory, "COMMIT", NULL, NULL, NULL) == SQLITE_OK
        && sqlite3_prepare_v2(memory, "SELECT * FROM held ORDER BY rowid", -1, &rows, NULL) == SQLITE_OK;
    sqlite3_finalize(insert);
    if (!ok) {
        sqlite3_finalize(rows);
        rows = NULL;
    }
    sqlite3_close_v2(memory);
    return rows;
}

// The copy's rows that were committed (`committed` of them) once a later
// write failed and was rolled back: the copy as it was at that commit
// (its journal is in memory, so the rollback needs no disk). NULL when
// they cannot be read back whole.
static sqlite3_stmt *committed_rows_statement(sqlite3 *copy, sqlite3_int64 committed) {
    if (!sqlite3_get_autocommit(copy)) sqlite3_exec(copy, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_stmt *last = NULL, *rows = NULL;
    int whole = sqlite3_prepare_v2(copy, "SELECT max(rowid) FROM copied", -1, &last, NULL) == SQLITE_OK
        && sqlite3_step(last) == SQLITE_ROW && sqlite3_column_int64(last, 0) == committed;
    sqlite3_finalize(last);
    if (whole && sqlite3_prepare_v2(copy, "SELECT * FROM copied ORDER BY rowid", -1, &rows, NULL) == SQLITE_OK) return rows;
    sqlite3_finalize(rows);
    return NULL;
}

int opsh_rows_spill(lua_State *L, sqlite3_stmt **slot, opsh_sql_route *route, const opsh_rows_origin *origin) {
    sqlite3_stmt *source = slot[0];
    int columns = sqlite3_column_count(source);
    sqlite3 *copy = NULL;
    sqlite3_stmt *insert = NULL;
    sqlite3_stmt *rows = NULL;
    // "": a temporary database on disk, deleted when it closes; nothing of
    // the user's file, no path at all. Its pages beyond a small cache go to
    // that file, so a long result costs disk, not memory. Its journal is
    // in memory: a batch whose write fails is rolled back without the
    // disk, to the copy as it was at its last commit.
    int prepared = open_copy_table("", "PRAGMA journal_mode = MEMORY; PRAGMA cache_size = -512; BEGIN; ", "copied", columns, ")",
                                   &copy, &insert);
    if (!prepared) {
        // No row was taken from the statement: the loop reads on from it,
        // holding its snapshot as any long scan does, and says so.
        note_copy_abandoned(L, route, origin, sqlite3_errmsg(copy));
        sqlite3_finalize(insert);
        sqlite3_close_v2(copy);
        return 0;
    }

    // Stepped without the reader's lock, like every row of the loop (the
    // watchdog leaves the handle alone while it is open); Ctrl-C and
    // --timeout interrupt the read connection, so this step too. At most
    // `most`: a rest without end (a recursive CTE the loop leaves by
    // `break`) was copied until the disk was full. Committed a batch at a
    // time, each batch's rows held until their commit: a write that fails
    // (the temporary directory full, a file-size limit) abandons the copy,
    // and the loop reads the committed rows, the held ones, then the rest
    // from its statement, on its snapshot (28c).
    held_rows held = { 0 };
    int code = SQLITE_ROW, written = 1;
    size_t copied = 0, committed_at = 0, most = copy_most(sqlite3_db_handle(source));
    sqlite3_int64 committed = 0, rows_copied = 0;
    // The copy's error as its write failed (the rollback after may change
    // what SQLite says), for the loop's note.
    char copy_error[160] = "";
    while (copied < most && (code = sqlite3_step(source)) == SQLITE_ROW) {
        for (int column = 0; column < columns; column++) {
            sqlite3_value *value = sqlite3_column_value(source, column);
            int type = sqlite3_value_type(value);
            sqlite3_bind_value(insert, column + 1, value);
            size_t counted = hold_value(&held, value, type);
            if (!counted) {
                free(held.bytes);
                return spill_failed(L, slot, route, NULL, copy, insert);
            }
            copied += counted;
        }
        copied += OPSH_ROWS_COPY_ROW_BYTES;
        rows_copied++;
        written = sqlite3_step(insert) == SQLITE_DONE;
        sqlite3_reset(insert);
        if (written && copied - committed_at >= OPSH_ROWS_COPY_BATCH_BYTES) {
            written = sqlite3_exec(copy, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
            if (written) {
                committed_at = copied;
                committed = rows_copied;
                held.length = 0;
                written = sqlite3_exec(copy, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
            }
        }
        if (!written) {
            snprintf(copy_error, sizeof copy_error, "%s", sqlite3_errmsg(copy));
            break;
        }
    }
    // Ctrl-C, --timeout and a lack of memory stop the loop now. Another
    // failure of the statement (a later row's malformed JSON) is the loop's
    // once the rows before it are read, as without a copy: raised then, its
    // words pushed now, while SQLite still has them.
    int fails_later = code != SQLITE_ROW && code != SQLITE_DONE;
    if (fails_later && ((code & 0xff) == SQLITE_INTERRUPT || (code & 0xff) == SQLITE_NOMEM)) {
        free(held.bytes);
        return spill_failed(L, slot, route, sqlite3_db_handle(source), copy, insert);
    }
    if (fails_later) route->failure_text(L, sqlite3_errmsg(sqlite3_db_handle(source)), sqlite3_sql(source));
    sqlite3_finalize(insert);
    insert = NULL;
    if (written && !(written = sqlite3_exec(copy, "COMMIT", NULL, NULL, NULL) == SQLITE_OK))
        snprintf(copy_error, sizeof copy_error, "%s", sqlite3_errmsg(copy));

    // What the loop reads, in order: the copy's rows (all of them, or
    // those committed before a write failed), the held rows the copy could
    // not keep, and the rest from its statement while it has one.
    sqlite3_stmt *parts[3] = { NULL, NULL, NULL };
    int count = 0;
    if (written) {
        if (sqlite3_prepare_v2(copy, "SELECT * FROM copied ORDER BY rowid", -1, &rows, NULL) != SQLITE_OK) {
            if (fails_later) lua_pop(L, 1);
            free(held.bytes);
            return spill_failed(L, slot, route, copy, copy, NULL);
        }
        parts[count++] = rows;
    } else {
        if (committed > 0) {
            if (!(rows = committed_rows_statement(copy, committed))) {
                if (fails_later) lua_pop(L, 1);
                free(held.bytes);
                return spill_failed(L, slot, route, copy, copy, NULL);
            }
            parts[count++] = rows;
        }
        if (held.length > 0) {
            sqlite3_stmt *kept = held_rows_statement(&held, columns);
            if (!kept) {
                sqlite3_finalize(rows);
                if (fails_later) lua_pop(L, 1);
                free(held.bytes);
                return spill_failed(L, slot, route, NULL, copy, NULL);
            }
            parts[count++] = kept;
        }
    }
    free(held.bytes);
    // The copy's connection closes once its statement is finalized
    // (whoever does: the loop's end, break, <close>, the chunk's end), and
    // its file goes; now if the loop reads none of it.
    sqlite3_close_v2(copy);

    if (code == SQLITE_ROW) {
        // Copied up to the bound, or the copy abandoned: the loop reads the
        // rest from its statement after these rows, holding the snapshot
        // as any long scan does (rows_next, opsh_sql.c), and says so. Off
        // the loop's rows: once a loop, as it is copied.
        parts[count++] = source;
        if (!written) {
            note_copy_abandoned(L, route, origin, copy_error);
        } else {
            char why[160];
            snprintf(why, sizeof why, "copied %zu MiB of its rest aside, the most its copy holds, and reads the rest from its statement",
                     most >> 20);
            note_kept_snapshot(L, route, origin, why);
        }
    } else {
        // The snapshot ends with the loop's statement (opsh_reader.c).
        opsh_sql_reader_finalize_cursor(route->session->reader, source);
    }
    slot[0] = parts[0];
    slot[2] = parts[1];
    slot[3] = parts[2];
    int first = parts[0] ? sqlite3_step(parts[0]) : SQLITE_DONE;
    return fails_later ? first | OPSH_ROWS_COPY_THEN_FAIL : first;
}

int opsh_rows_when_overdue(lua_State *L, sqlite3_stmt **slot, opsh_sql_route *route, const int **overdue, opsh_rows_pace *pace,
                           const opsh_rows_origin *origin) {
    opsh_sql_reader *reader = route->session->reader;
    struct timespec spec;
    clock_gettime(CLOCK_MONOTONIC, &spec);
    double now = (double)spec.tv_sec + (double)spec.tv_nsec / 1e9;
    opsh_sql_reader_enter(reader);
    int mark = reader->overdue;
    int late = mark != 0 && now - reader->overdue_at > OPSH_ROWS_SLOW_TO_ASK;
    double window = reader->window;
    opsh_sql_reader_leave(reader);
    // The watchdog numbers its marks one a window; marks the loop slept
    // through count as windows it asked for nothing in.
    int windows = mark - pace->mark > 0 ? mark - pace->mark : 1;
    int unhurried = (double)(pace->rows - pace->rows_at_mark) < OPSH_ROWS_SLOW_PACE * window * windows;
    pace->mark = mark;
    pace->rows_at_mark = pace->rows;
    pace->slow_marks = mark != 0 && (late || unhurried) ? pace->slow_marks + 1 : 0;
    if (pace->slow_marks < OPSH_ROWS_SLOW_MARKS) return 0;
    // Copied: the loop's flag is opsh_rows_never_overdue now, and the mark
    // it saw must be that flag's, or every row after the copy asks again
    // while another cursor keeps the reader's mark up (an outer loop), and
    // every second one copied the copy's rest again (28d).
    *overdue = &opsh_rows_never_overdue;
    pace->mark = opsh_rows_never_overdue;
    pace->slow_marks = 0;
    return opsh_rows_spill(L, slot, route, origin);
}
