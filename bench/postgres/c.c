// C against libpq, statements prepared once (PQprepare, PQexecPrepared),
// text parameters and results: cc -O2 c.c -I/usr/include/postgresql -lpq;
// ./a.out URL TABLE N Q
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static double cpu(void) { return (double)clock() / CLOCKS_PER_SEC; }

static PGconn *conn;
static void check(PGresult *result, ExecStatusType expected, const char *what) {
    if (PQresultStatus(result) != expected) {
        fprintf(stderr, "%s: %s", what, PQerrorMessage(conn));
        exit(1);
    }
}
static void command(const char *sql) {
    PGresult *result = PQexec(conn, sql);
    check(result, PGRES_COMMAND_OK, sql);
    PQclear(result);
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    const char *table = argv[2];
    long n = atol(argv[3]), q = atol(argv[4]);
    conn = PQconnectdb(argv[1]);
    if (PQstatus(conn) != CONNECTION_OK) { fprintf(stderr, "%s", PQerrorMessage(conn)); return 1; }
    char sql[256];
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", table);
    command(sql);
    snprintf(sql, sizeof sql, "CREATE TABLE %s (id bigint PRIMARY KEY, name text NOT NULL, value double precision NOT NULL)", table);
    command(sql);

    double w0 = wall(), c0 = cpu();
    command("BEGIN");
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, name, value) VALUES ($1, $2, $3)", table);
    PGresult *prepared = PQprepare(conn, "insert", sql, 3, NULL);
    check(prepared, PGRES_COMMAND_OK, "prepare insert");
    PQclear(prepared);
    char id[32], name[32], value[32];
    const char *values[3] = {id, name, value};
    for (long i = 1; i <= n; i++) {
        snprintf(id, sizeof id, "%ld", i);
        snprintf(name, sizeof name, "name%ld", i);
        snprintf(value, sizeof value, "%.17g", i * 0.5);
        PGresult *result = PQexecPrepared(conn, "insert", 3, values, NULL, NULL, 0);
        check(result, PGRES_COMMAND_OK, "insert");
        PQclear(result);
    }
    command("COMMIT");
    double w1 = wall(), c1 = cpu();

    snprintf(sql, sizeof sql, "SELECT * FROM %s", table);
    PGresult *scan = PQexec(conn, sql);
    check(scan, PGRES_TUPLES_OK, "scan");
    long rows = PQntuples(scan);
    double sum = 0;
    for (long r = 0; r < rows; r++) sum += strtod(PQgetvalue(scan, r, 2), NULL);
    PQclear(scan);
    double w2 = wall(), c2 = cpu();

    snprintf(sql, sizeof sql, "SELECT * FROM %s WHERE id = $1", table);
    prepared = PQprepare(conn, "point", sql, 1, NULL);
    check(prepared, PGRES_COMMAND_OK, "prepare point");
    PQclear(prepared);
    long long ids = 0;
    const char *key[1] = {id};
    for (long i = 1; i <= q; i++) {
        long k = (i * 7919) % n + 1;
        snprintf(id, sizeof id, "%ld", k);
        PGresult *result = PQexecPrepared(conn, "point", 1, key, NULL, NULL, 0);
        check(result, PGRES_TUPLES_OK, "point");
        snprintf(name, sizeof name, "name%ld", k);
        if (PQntuples(result) != 1 || atol(PQgetvalue(result, 0, 0)) != k || strcmp(PQgetvalue(result, 0, 1), name) != 0
            || strtod(PQgetvalue(result, 0, 2), NULL) != k * 0.5) {
            fprintf(stderr, "wrong row for id %ld\n", k);
            return 1;
        }
        ids += atol(PQgetvalue(result, 0, 0));
        PQclear(result);
    }
    double w3 = wall(), c3 = cpu();
    snprintf(sql, sizeof sql, "DROP TABLE %s", table);
    command(sql);
    PQfinish(conn);
    printf("%.1f %.1f %.1f %.1f %.1f %.1f %ld %.1f %lld\n", (w1 - w0) * 1e3, (w2 - w1) * 1e3, (w3 - w2) * 1e3,
           (c1 - c0) * 1e3, (c2 - c1) * 1e3, (c3 - c2) * 1e3, rows, sum, ids);
    return 0;
}
