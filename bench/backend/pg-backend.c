// The backend beside opsh on PostgreSQL (scripts/bench, section "backend"):
// cc -O2 pg-backend.c -I/usr/include/postgresql -lpq
//
//   pg-backend write CONNINFO STOPFILE EVENT
//       one telemetry row per BEGIN … COMMIT every 5 ms until STOPFILE
//       exists; prints "ready" after its first commit, then at the end its
//       commits, its failures, its longest transaction and its longest
//       BEGIN…first statement, in seconds (as opsh-bench --backend-writer).
//   pg-backend count CONNINFO STOPFILE
//       counts the rows of buildLogs (on the server: buildlogs) every 5 ms until STOPFILE exists;
//       prints "ready", then each distinct count in the order first seen,
//       then the number of counts taken: a reader's view of an import.
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int ok(PGresult *r) {
    ExecStatusType s = PQresultStatus(r);
    PQclear(r);
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

static int write_loop(PGconn *c, const char *stop, const char *event) {
    long commits = 0, failures = 0;
    double worst = 0, worst_lock = 0;
    int first = 1;
    while (first || access(stop, F_OK) != 0) {
        double start = now();
        char properties[64], created[64];
        snprintf(properties, sizeof properties, "{\"i\":%ld}", commits);
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        snprintf(created, sizeof created, "%.6f", wall.tv_sec + wall.tv_nsec / 1e9);
        const char *values[3] = {event, properties, created};
        int good = ok(PQexec(c, "BEGIN"));
        double locked = now() - start;
        good = good && ok(PQexecParams(c, "INSERT INTO telemetry (event, properties, created_at) VALUES ($1, $2, $3)",
                                       3, NULL, values, NULL, NULL, 0));
        good = good && ok(PQexec(c, "COMMIT"));
        if (!good) { ok(PQexec(c, "ROLLBACK")); failures++; } else commits++;
        double took = now() - start;
        if (took > worst) worst = took;
        if (locked > worst_lock) worst_lock = locked;
        if (first) { printf("ready\n"); fflush(stdout); first = 0; }
        usleep(5000);
    }
    printf("%ld %ld %f %f\n", commits, failures, worst, worst_lock);
    return 0;
}

static int count_loop(PGconn *c, const char *stop) {
    long seen[64], distinct = 0, samples = 0;
    int first = 1;
    while (first || access(stop, F_OK) != 0) {
        PGresult *r = PQexec(c, "SELECT count(*) FROM buildlogs");
        if (PQresultStatus(r) != PGRES_TUPLES_OK) { fprintf(stderr, "%s", PQerrorMessage(c)); PQclear(r); return 1; }
        long n = atol(PQgetvalue(r, 0, 0));
        PQclear(r);
        samples++;
        if (distinct == 0 || seen[distinct - 1] != n) {
            if (distinct < 64) seen[distinct++] = n;
        }
        if (first) { printf("ready\n"); fflush(stdout); first = 0; }
        usleep(5000);
    }
    for (long i = 0; i < distinct; i++) printf("%ld ", seen[i]);
    printf("%ld\n", samples);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    PGconn *c = PQconnectdb(argv[2]);
    if (PQstatus(c) != CONNECTION_OK) { fprintf(stderr, "%s", PQerrorMessage(c)); return 1; }
    if (strcmp(argv[1], "write") == 0 && argc == 5) return write_loop(c, argv[3], argv[4]);
    if (strcmp(argv[1], "count") == 0 && argc == 4) return count_loop(c, argv[3]);
    return 2;
}
