// The read connection's shared snapshot (Store's ReadConnection; the `db`
// module's C path reads through it too). No Lua here: Store owns it.
#pragma once

typedef struct sqlite3 sqlite3;

/// The read connection outside transactions, and its shared snapshot: a
/// burst of reads shares one read transaction for up to `window` seconds,
/// ended early by this session's writes and when Lua goes idle, and ended
/// by time: a watchdog thread commits a snapshot older than the window, so
/// opsh never pins the WAL while it does something else (the connection is
/// opened FULLMUTEX for that; a `db.rows` loop still reading keeps its
/// snapshot, since SQLite refuses to commit under an active statement).
typedef struct opsh_sql_reader {
    sqlite3 *handle;
    double window;
    /// Monotonic seconds when the snapshot began; 0 when there is none.
    double started;
    long write_count;
    /// Opaque: the lock over `started` and the watchdog thread's state.
    void *watchdog;
} opsh_sql_reader;

/// A reader on `handle` (opened SQLITE_OPEN_FULLMUTEX) with its watchdog
/// thread running; free it with opsh_sql_reader_free before closing the
/// handle.
opsh_sql_reader *opsh_sql_reader_new(sqlite3 *handle, double window);
void opsh_sql_reader_free(opsh_sql_reader *reader);


/// Keeps the current snapshot while it is fresh, else starts a new one.
void opsh_sql_reader_use_snapshot(opsh_sql_reader *reader, long write_count);
/// Ends the shared read transaction; 0 while a db.rows loop still reads
/// from it (it ends at the next chance).
int opsh_sql_reader_end_snapshot(opsh_sql_reader *reader);
