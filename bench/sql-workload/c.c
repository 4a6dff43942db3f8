// The SQLite C API, prepared statements reused: cc -O2 c.c -lsqlite3; ./a.out FILE N Q
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double ms(clock_t from, clock_t to) { return (double)(to - from) * 1000.0 / CLOCKS_PER_SEC; }

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    long n = atol(argv[2]), q = atol(argv[3]);
    sqlite3 *db;
    if (sqlite3_open(argv[1], &db) != SQLITE_OK) return 1;
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE bench (id INTEGER PRIMARY KEY, name TEXT, score REAL, qty INTEGER)", 0, 0, 0);
    clock_t t0 = clock();
    sqlite3_exec(db, "BEGIN", 0, 0, 0);
    sqlite3_stmt *insert;
    sqlite3_prepare_v2(db, "INSERT INTO bench (name, score, qty) VALUES (?, ?, ?)", -1, &insert, 0);
    char name[32];
    for (long i = 1; i <= n; i++) {
        int length = snprintf(name, sizeof name, "name%ld", i);
        sqlite3_bind_text(insert, 1, name, length, SQLITE_TRANSIENT);
        sqlite3_bind_double(insert, 2, i * 0.5);
        sqlite3_bind_int64(insert, 3, i);
        if (sqlite3_step(insert) != SQLITE_DONE) return 1;
        sqlite3_reset(insert);
    }
    sqlite3_finalize(insert);
    sqlite3_exec(db, "COMMIT", 0, 0, 0);
    clock_t t1 = clock();
    long long sum = 0;
    sqlite3_stmt *scan;
    sqlite3_prepare_v2(db, "SELECT qty FROM bench", -1, &scan, 0);
    while (sqlite3_step(scan) == SQLITE_ROW) sum += sqlite3_column_int64(scan, 0);
    sqlite3_finalize(scan);
    clock_t t2 = clock();
    long long found = 0;
    sqlite3_stmt *point;
    sqlite3_prepare_v2(db, "SELECT id, name, score, qty FROM bench WHERE id = ?", -1, &point, 0);
    for (long i = 1; i <= q; i++) {
        sqlite3_bind_int64(point, 1, (i * 7919) % n + 1);
        if (sqlite3_step(point) != SQLITE_ROW) return 1;
        found += sqlite3_column_int64(point, 3);
        sqlite3_reset(point);
    }
    sqlite3_finalize(point);
    clock_t t3 = clock();
    printf("%.1f %.1f %.1f %lld\n", ms(t0, t1), ms(t1, t2), ms(t2, t3), sum + found);
    sqlite3_close(db);
    return 0;
}
