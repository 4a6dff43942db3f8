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

static int spill_failed(lua_State *L, sqlite3_stmt **slot, opsh_sql_route *route, sqlite3 *failing, sqlite3 *copy, sqlite3_stmt *insert) {
    sqlite3_stmt *source = slot[0];
    route->failure_text(L, failing ? sqlite3_errmsg(failing) : "out of memory", sqlite3_sql(source));
    sqlite3_finalize(insert);
    sqlite3_close_v2(copy);
    slot[0] = NULL;
    opsh_sql_reader_finalize_cursor(route->session->reader, source);
    return OPSH_ROWS_SPILL_FAILED;
}

int opsh_rows_spill(lua_State *L, sqlite3_stmt **slot, opsh_sql_route *route) {
    sqlite3_stmt *source = slot[0];
    int columns = sqlite3_column_count(source);
    sqlite3 *copy = NULL;
    sqlite3_stmt *insert = NULL;
    sqlite3_stmt *rows = NULL;
    // "": a temporary database on disk, deleted when it closes; nothing of
    // the user's file, no path at all. Its pages beyond a small cache go to
    // that file, so a long result costs disk, not memory.
    if (sqlite3_open_v2("", &copy, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        return spill_failed(L, slot, route, copy, copy, NULL);
    char *create = copy_sql("PRAGMA journal_mode = OFF; PRAGMA cache_size = -512; CREATE TABLE copied(", "%sc%d", ", ", columns, "); BEGIN");
    char *insert_sql = copy_sql("INSERT INTO copied VALUES (", "%s?", ", ", columns, ")");
    int prepared = create && insert_sql && sqlite3_exec(copy, create, NULL, NULL, NULL) == SQLITE_OK
        && sqlite3_prepare_v2(copy, insert_sql, -1, &insert, NULL) == SQLITE_OK;
    free(create);
    free(insert_sql);
    if (!prepared) return spill_failed(L, slot, route, create && insert_sql ? copy : NULL, copy, insert);

    // Stepped without the reader's lock, like every row of the loop (the
    // watchdog leaves the handle alone while it is open); Ctrl-C and
    // --timeout interrupt the read connection, so this step too. At most
    // `most`: a rest without end (a recursive CTE the loop leaves by
    // `break`) was copied until the disk was full.
    int code = SQLITE_ROW;
    size_t copied = 0, most = copy_most(sqlite3_db_handle(source));
    while (copied < most && (code = sqlite3_step(source)) == SQLITE_ROW) {
        for (int column = 0; column < columns; column++) {
            int type = sqlite3_column_type(source, column);
            copied += type == SQLITE_TEXT || type == SQLITE_BLOB ? (size_t)sqlite3_column_bytes(source, column) : 8;
            sqlite3_bind_value(insert, column + 1, sqlite3_column_value(source, column));
        }
        copied += OPSH_ROWS_COPY_ROW_BYTES;
        if (sqlite3_step(insert) != SQLITE_DONE) return spill_failed(L, slot, route, copy, copy, insert);
        sqlite3_reset(insert);
    }
    // Ctrl-C, --timeout and a lack of memory stop the loop now. Another
    // failure of the statement (a later row's malformed JSON) is the loop's
    // once the rows before it are read, as without a copy: raised then, its
    // words pushed now, while SQLite still has them.
    int fails_later = code != SQLITE_ROW && code != SQLITE_DONE;
    if (fails_later && ((code & 0xff) == SQLITE_INTERRUPT || (code & 0xff) == SQLITE_NOMEM))
        return spill_failed(L, slot, route, sqlite3_db_handle(source), copy, insert);
    if (fails_later) route->failure_text(L, sqlite3_errmsg(sqlite3_db_handle(source)), sqlite3_sql(source));
    sqlite3_finalize(insert);
    insert = NULL;
    if (sqlite3_exec(copy, "COMMIT", NULL, NULL, NULL) != SQLITE_OK
        || sqlite3_prepare_v2(copy, "SELECT * FROM copied ORDER BY rowid", -1, &rows, NULL) != SQLITE_OK) {
        if (fails_later) lua_pop(L, 1);
        return spill_failed(L, slot, route, copy, copy, NULL);
    }
    // The copy's connection closes once `rows` is finalized (whoever does:
    // the loop's end, break, <close>, the chunk's end), and its file goes.
    sqlite3_close_v2(copy);

    slot[0] = rows;
    if (code == SQLITE_ROW) {
        // Copied up to the bound: the loop reads the rest from its
        // statement after the copy's rows, holding the snapshot as any
        // long scan does (rows_next, opsh_sql.c).
        slot[2] = source;
    } else {
        // The snapshot ends with the loop's statement (opsh_reader.c).
        opsh_sql_reader_finalize_cursor(route->session->reader, source);
    }
    int first = sqlite3_step(rows);
    return fails_later ? first | OPSH_ROWS_COPY_THEN_FAIL : first;
}

int opsh_rows_when_overdue(lua_State *L, sqlite3_stmt **slot, opsh_sql_route *route, const int **overdue, opsh_rows_pace *pace) {
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
    return opsh_rows_spill(L, slot, route);
}
