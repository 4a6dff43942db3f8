// C against libpq in pipeline mode (PQenterPipelineMode): the 200,000
// INSERTs of one transaction sent with PQsendQueryPrepared, one
// PQpipelineSync at the end, results read as they come (the socket
// non-blocking, so neither side waits on the other):
// cc -O2 c.c -I/usr/include/postgresql -lpq; ./a.out URL TABLE N
// Prints: insert-ms rows
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/select.h>

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static PGconn *conn;
static void command(const char *sql) {
    PGresult *result = PQexec(conn, sql);
    if (PQresultStatus(result) != PGRES_COMMAND_OK && PQresultStatus(result) != PGRES_TUPLES_OK) {
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(conn));
        exit(1);
    }
    PQclear(result);
}

/// Reads what the server has sent; counts the results of the inserts.
static long consume(long *pending, int *synced) {
    if (!PQconsumeInput(conn)) { fprintf(stderr, "%s", PQerrorMessage(conn)); exit(1); }
    long done = 0;
    while (!PQisBusy(conn)) {
        PGresult *result = PQgetResult(conn);
        if (result == NULL) continue;  // between two queries' results
        ExecStatusType status = PQresultStatus(result);
        if (status == PGRES_PIPELINE_SYNC) { *synced = 1; PQclear(result); break; }
        if (status != PGRES_COMMAND_OK) { fprintf(stderr, "insert: %s", PQresultErrorMessage(result)); exit(1); }
        PQclear(result);
        (*pending)--;
        done++;
        if (*pending == 0) break;
    }
    return done;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    const char *table = argv[2];
    long n = atol(argv[3]);
    conn = PQconnectdb(argv[1]);
    if (PQstatus(conn) != CONNECTION_OK) { fprintf(stderr, "%s", PQerrorMessage(conn)); return 1; }
    char sql[256];
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", table);
    command(sql);
    snprintf(sql, sizeof sql, "CREATE TABLE %s (id bigint PRIMARY KEY, name text NOT NULL, value double precision NOT NULL)", table);
    command(sql);

    double w0 = wall();
    command("BEGIN");
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, name, value) VALUES ($1, $2, $3)", table);
    PGresult *prepared = PQprepare(conn, "insert", sql, 3, NULL);
    if (PQresultStatus(prepared) != PGRES_COMMAND_OK) { fprintf(stderr, "prepare: %s", PQerrorMessage(conn)); return 1; }
    PQclear(prepared);
    PQsetnonblocking(conn, 1);
    PQenterPipelineMode(conn);
    char id[32], name[32], value[32];
    const char *values[3] = {id, name, value};
    long pending = 0;
    int synced = 0;
    for (long i = 1; i <= n; i++) {
        snprintf(id, sizeof id, "%ld", i);
        snprintf(name, sizeof name, "name%ld", i);
        snprintf(value, sizeof value, "%.1f", i * 0.5);
        if (!PQsendQueryPrepared(conn, "insert", 3, values, NULL, NULL, 0)) { fprintf(stderr, "%s", PQerrorMessage(conn)); return 1; }
        pending++;
        if (PQflush(conn) < 0) return 1;
        if (i % 256 == 0) consume(&pending, &synced);
    }
    PQpipelineSync(conn);
    while (!synced) {
        while (PQflush(conn) > 0) {
            fd_set r, w;
            FD_ZERO(&r); FD_ZERO(&w);
            FD_SET(PQsocket(conn), &r); FD_SET(PQsocket(conn), &w);
            select(PQsocket(conn) + 1, &r, &w, NULL, NULL);
            consume(&pending, &synced);
        }
        fd_set r;
        FD_ZERO(&r);
        FD_SET(PQsocket(conn), &r);
        if (PQisBusy(conn)) select(PQsocket(conn) + 1, &r, NULL, NULL, NULL);
        consume(&pending, &synced);
    }
    PQexitPipelineMode(conn);
    PQsetnonblocking(conn, 0);
    command("COMMIT");
    double w1 = wall();
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    PGresult *counted = PQexec(conn, sql);
    long rows = atol(PQgetvalue(counted, 0, 0));
    PQclear(counted);
    snprintf(sql, sizeof sql, "DROP TABLE %s", table);
    command(sql);
    PQfinish(conn);
    printf("%.1f %ld\n", (w1 - w0) * 1e3, rows);
    return 0;
}
