// The storage core's C peer (opsh-bench, "Storage core"): the same work as
// opsh's benchmark on the same kind of data, through SQLite's C API with
// prepared statements reused. cc -O2 c.c -lsqlite3
//   ./a.out point FILE        20,000 point reads of `builds` by id (every column read)
//   ./a.out telemetry FILE    1,000,000 telemetry rows in one transaction
// Prints the seconds the work took.
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int point(sqlite3 *db) {
    // The ids, in the order opsh's benchmark reads them.
    sqlite3_stmt *all;
    if (sqlite3_prepare_v2(db, "SELECT id FROM builds ORDER BY rowid", -1, &all, 0) != SQLITE_OK) return 1;
    int count = 0, capacity = 16384;
    char **ids = malloc(sizeof(char *) * capacity);
    while (sqlite3_step(all) == SQLITE_ROW) {
        if (count == capacity) ids = realloc(ids, sizeof(char *) * (capacity *= 2));
        ids[count++] = strdup((const char *)sqlite3_column_text(all, 0));
    }
    sqlite3_finalize(all);
    if (count == 0) return 1;
    sqlite3_stmt *read;
    if (sqlite3_prepare_v2(db, "SELECT * FROM builds WHERE id = ?", -1, &read, 0) != SQLITE_OK) return 1;
    double start = now();
    long long touched = 0;
    for (int index = 0; index < 20000; index++) {
        // Each read its own transaction, as a lookup outside one is.
        sqlite3_bind_text(read, 1, ids[(index * 7919) % count], -1, SQLITE_STATIC);
        if (sqlite3_step(read) != SQLITE_ROW) return 1;
        for (int column = 0; column < sqlite3_column_count(read); column++) touched += sqlite3_column_bytes(read, column);
        sqlite3_reset(read);
    }
    printf("%.6f\n", now() - start);
    sqlite3_finalize(read);
    return touched > 0 ? 0 : 1;
}

static int telemetry(sqlite3 *db) {
    const char *names[] = { "launch", "generation", "error", "download" };
    sqlite3_stmt *insert;
    if (sqlite3_prepare_v2(db, "INSERT INTO telemetry (event, properties, session_id, created_at) VALUES (?, ?, ?, ?)",
                           -1, &insert, 0) != SQLITE_OK) return 1;
    double base = (double)time(NULL);
    char properties[64], session[16];
    double start = now();
    sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0);
    for (int index = 0; index < 1000000; index++) {
        sqlite3_bind_text(insert, 1, names[index & 3], -1, SQLITE_STATIC);
        if (index % 3 == 0) {
            int length = snprintf(properties, sizeof properties, "{\"latency\":%d}", index % 997);
            sqlite3_bind_text(insert, 2, properties, length, SQLITE_TRANSIENT);
        } else sqlite3_bind_null(insert, 2);
        if (index % 5 == 0) {
            int length = snprintf(session, sizeof session, "s%d", index % 101);
            sqlite3_bind_text(insert, 3, session, length, SQLITE_TRANSIENT);
        } else sqlite3_bind_null(insert, 3);
        sqlite3_bind_double(insert, 4, base + index / 1000.0);
        if (sqlite3_step(insert) != SQLITE_DONE) return 1;
        sqlite3_reset(insert);
    }
    sqlite3_exec(db, "COMMIT", 0, 0, 0);
    printf("%.6f\n", now() - start);
    sqlite3_finalize(insert);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    sqlite3 *db;
    if (sqlite3_open(argv[2], &db) != SQLITE_OK) return 1;
    sqlite3_busy_timeout(db, 5000);
    if (strcmp(argv[1], "point") == 0) return point(db);
    if (strcmp(argv[1], "telemetry") == 0) return telemetry(db);
    return 2;
}
