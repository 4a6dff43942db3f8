// The backend beside a repair loop on PostgreSQL (bench/subxact/README.md):
// cc -O2 backend.c -I/usr/include/postgresql -lpq
//
//   backend write CONNINFO STOPFILE OUT EVENT
//       one telemetry row per BEGIN … COMMIT every 5 ms, as
//       bench/backend/pg-backend.c writes;
//   backend read CONNINFO STOPFILE OUT WINDOW
//       the telemetry counts by event of the last WINDOW seconds
//       (TelemetryRepository.countsByEvent's query, a dashboard's), every
//       5 ms;
//
// until STOPFILE exists. Each prints "ready" after its first transaction or
// query, and writes one line per transaction or query to OUT:
//   START SECONDS ROWS
// START its start on CLOCK_REALTIME (seconds since the epoch, as the
// server's clock_timestamp() reads it on this machine), SECONDS how long it
// took, ROWS the rows counted (read) or 1 (write); a failure ends the
// program with the server's message and exit 1.
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void check(PGconn *c, PGresult *r) {
    ExecStatusType s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        fprintf(stderr, "backend: %s", PQerrorMessage(c));
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: backend write|read CONNINFO STOPFILE OUT EVENT|WINDOW\n"); return 2; }
    int writing = strcmp(argv[1], "write") == 0;
    if (!writing && strcmp(argv[1], "read") != 0) return 2;
    const char *stop = argv[3];
    FILE *out = fopen(argv[4], "w");
    if (!out) { perror(argv[4]); return 1; }
    PGconn *c = PQconnectdb(argv[2]);
    if (PQstatus(c) != CONNECTION_OK) { fprintf(stderr, "backend: %s", PQerrorMessage(c)); return 1; }
    PGresult *r = writing
        ? PQprepare(c, "w", "INSERT INTO telemetry (event, properties, created_at) VALUES ($1, $2, $3)", 3, NULL)
        : PQprepare(c, "r", "SELECT event, count(*) AS count FROM telemetry WHERE created_at >= $1 "
                            "GROUP BY event ORDER BY count DESC, event", 1, NULL);
    check(c, r);
    PQclear(r);
    double window = writing ? 0 : atof(argv[5]);
    long done = 0;
    while (done == 0 || access(stop, F_OK) != 0) {
        double started = wall(), clock = monotonic();
        long rows = 1;
        if (writing) {
            char properties[64], created[64];
            snprintf(properties, sizeof properties, "{\"i\":%ld}", done);
            snprintf(created, sizeof created, "%.6f", started);
            const char *values[3] = {argv[5], properties, created};
            r = PQexec(c, "BEGIN"); check(c, r); PQclear(r);
            r = PQexecPrepared(c, "w", 3, values, NULL, NULL, 0); check(c, r); PQclear(r);
            r = PQexec(c, "COMMIT"); check(c, r); PQclear(r);
        } else {
            char since[64];
            snprintf(since, sizeof since, "%.6f", started - window);
            const char *values[1] = {since};
            r = PQexecPrepared(c, "r", 1, values, NULL, NULL, 0); check(c, r);
            rows = 0;
            for (int i = 0; i < PQntuples(r); i++) rows += atol(PQgetvalue(r, i, 1));
            PQclear(r);
        }
        double took = monotonic() - clock;
        fprintf(out, "%.6f %.6f %ld\n", started, took, rows);
        if (done++ == 0) { printf("ready\n"); fflush(stdout); }
        usleep(5000);
    }
    fclose(out);
    PQfinish(c);
    return 0;
}
