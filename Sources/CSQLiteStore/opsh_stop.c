#include "opsh_stop.h"
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>

static _Atomic(const atomic_int *) stop_flag;
static pthread_t stop_thread;

void opsh_stop_statements_when(const void *flag) {
    stop_thread = pthread_self();
    atomic_store(&stop_flag, (const atomic_int *)flag);
}

static int opsh_stop_requested(void *unused) {
    (void)unused;
    const atomic_int *flag = atomic_load(&stop_flag);
    return flag != NULL && atomic_load(flag) != 0 && pthread_equal(pthread_self(), stop_thread);
}

void opsh_stop_statements_on(sqlite3 *db) {
    sqlite3_progress_handler(db, 1000, opsh_stop_requested, NULL);
}
