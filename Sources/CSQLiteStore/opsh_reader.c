#include <sqlite3.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "opsh_reader.h"

// MARK: The read snapshot

static double monotonic_now(void) {
    struct timespec spec;
    clock_gettime(CLOCK_MONOTONIC, &spec);
    return (double)spec.tv_sec + (double)spec.tv_nsec / 1e9;
}

typedef struct {
    /// Recursive: a use of the handle may nest in another (a cursor
    /// finalized by a collection while a row is made).
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    int stop;
    /// 0 until the handle's first use starts the thread; 1 once it
    /// runs; -1 when it could not start (the lock still serves).
    int thread_state;
} reader_watchdog;

static int end_snapshot_locked(opsh_sql_reader *reader) {
    if (reader->open_cursors == 0) __atomic_store_n(&reader->overdue, 0, __ATOMIC_RELEASE);
    if (reader->started == 0) return 1;
    if (sqlite3_exec(reader->handle, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) return 0;
    reader->started = 0;
    return 1;
}

// Every window, commits a snapshot older than the window, unless a
// `db.rows` loop steps on the handle without the lock (opsh_reader.h):
// then it marks the loops overdue, and the next row of each slow one reads
// the rest of its result into a copy and finalizes its statement
// (opsh_rows_spill.h).
static void *watch_snapshot(void *argument) {
    opsh_sql_reader *reader = argument;
    reader_watchdog *dog = reader->watchdog;
    pthread_mutex_lock(&dog->lock);
    while (!dog->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long nanoseconds = (long)(reader->window * 1e9);
        until.tv_sec += nanoseconds / 1000000000L;
        until.tv_nsec += nanoseconds % 1000000000L;
        if (until.tv_nsec >= 1000000000L) { until.tv_sec += 1; until.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&dog->wake, &dog->lock, &until);
        if (dog->stop) break;
        double now = monotonic_now();
        if (reader->open_cursors == 0) {
            if (reader->started != 0 && now - reader->started >= reader->window) end_snapshot_locked(reader);
        } else {
            double since = reader->started != 0 && reader->started < reader->cursors_since ? reader->started : reader->cursors_since;
            if (now - since >= reader->window) {
                reader->overdue_at = now;
                int turn = __atomic_load_n(&reader->overdue, __ATOMIC_RELAXED) + 1;
                __atomic_store_n(&reader->overdue, turn > 0 ? turn : 1, __ATOMIC_RELEASE);
            }
        }
    }
    pthread_mutex_unlock(&dog->lock);
    return NULL;
}

opsh_sql_reader *opsh_sql_reader_new(sqlite3 *handle, double window) {
    opsh_sql_reader *reader = calloc(1, sizeof *reader);
    reader_watchdog *dog = calloc(1, sizeof *dog);
    if (!reader || !dog) { free(reader); free(dog); return NULL; }
    reader->handle = handle;
    reader->window = window;
    reader->watchdog = dog;
    pthread_mutexattr_t recursive;
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&dog->lock, &recursive);
    pthread_mutexattr_destroy(&recursive);
    pthread_cond_init(&dog->wake, NULL);
    return reader;
}

// The thread starts with the first snapshot or `db.rows` statement, not
// with the reader: a run that never reads (`opsh -e 'return 1'`) starts no
// thread for it (ARCHITECTURE.md, "Start-up"). Until then there is nothing
// for it to end or mark.
static void start_watchdog(opsh_sql_reader *reader) {
    reader_watchdog *dog = reader->watchdog;
    if (__builtin_expect(__atomic_load_n(&dog->thread_state, __ATOMIC_RELAXED) != 0, 1)) return;
    int expected = 0;
    if (!__atomic_compare_exchange_n(&dog->thread_state, &expected, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    int state = pthread_create(&dog->thread, NULL, watch_snapshot, reader) == 0 ? 1 : -1;
    __atomic_store_n(&dog->thread_state, state, __ATOMIC_RELEASE);
}

void opsh_sql_reader_free(opsh_sql_reader *reader) {
    if (!reader) return;
    reader_watchdog *dog = reader->watchdog;
    if (dog) {
        if (__atomic_load_n(&dog->thread_state, __ATOMIC_ACQUIRE) == 1) {
            pthread_mutex_lock(&dog->lock);
            dog->stop = 1;
            pthread_cond_signal(&dog->wake);
            pthread_mutex_unlock(&dog->lock);
            pthread_join(dog->thread, NULL);
        }
        pthread_mutex_destroy(&dog->lock);
        pthread_cond_destroy(&dog->wake);
        free(dog);
    }
    free(reader);
}

void opsh_sql_reader_enter(opsh_sql_reader *reader) {
    pthread_mutex_lock(&((reader_watchdog *)reader->watchdog)->lock);
}

void opsh_sql_reader_leave(opsh_sql_reader *reader) {
    pthread_mutex_unlock(&((reader_watchdog *)reader->watchdog)->lock);
}

void opsh_sql_reader_cursor_opened(opsh_sql_reader *reader, sqlite3_stmt *statement) {
    if (statement && sqlite3_db_handle(statement) == reader->handle && reader->open_cursors++ == 0) {
        reader->cursors_since = monotonic_now();
        start_watchdog(reader);
    }
}

void opsh_sql_reader_finalize_cursor(opsh_sql_reader *reader, sqlite3_stmt *statement) {
    opsh_sql_reader_enter(reader);
    if (statement && sqlite3_db_handle(statement) == reader->handle) reader->open_cursors--;
    sqlite3_finalize(statement);
    // The last statement of an overdue snapshot: the snapshot ends now
    // rather than at the watchdog's next turn.
    if (reader->open_cursors == 0 && __atomic_load_n(&reader->overdue, __ATOMIC_RELAXED)) end_snapshot_locked(reader);
    opsh_sql_reader_leave(reader);
}

void opsh_sql_reader_use_snapshot(opsh_sql_reader *reader, long write_count) {
    double now = monotonic_now();
    opsh_sql_reader_enter(reader);
    if (reader->started != 0) {
        if ((now - reader->started < reader->window && write_count == reader->write_count)
            || !end_snapshot_locked(reader)) {
            opsh_sql_reader_leave(reader);
            return;
        }
    }
    if (sqlite3_get_autocommit(reader->handle) && sqlite3_exec(reader->handle, "BEGIN", NULL, NULL, NULL) == SQLITE_OK) {
        reader->started = now;
        reader->write_count = write_count;
        start_watchdog(reader);
    }
    opsh_sql_reader_leave(reader);
}

int opsh_sql_reader_end_snapshot(opsh_sql_reader *reader) {
    opsh_sql_reader_enter(reader);
    int ended = end_snapshot_locked(reader);
    opsh_sql_reader_leave(reader);
    return ended;
}
