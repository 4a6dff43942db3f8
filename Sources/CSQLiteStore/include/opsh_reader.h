// The read connection's shared snapshot (Store's ReadConnection; the `db`
// module's C path reads through it too). No Lua here: Store owns it.
#pragma once

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

/// The read connection outside transactions, and its shared snapshot: a
/// burst of reads shares one read transaction for up to `window` seconds,
/// ended early by this session's writes and when Lua goes idle, and ended
/// by time: a watchdog thread commits a snapshot older than the window, so
/// opsh never pins the WAL while it does something else. A `db.rows` loop
/// still reading keeps its snapshot (SQLite ends the read transaction only
/// once its statements are done) until the watchdog marks it `overdue`: a
/// loop whose script is slow to ask for its next row then reads the rest of
/// its result into a private copy and finalizes its statement
/// (opsh_rows_spill.h), and the snapshot ends.
///
/// The connection is opened SQLITE_OPEN_NOMUTEX: SQLite's own mutex would
/// be taken by every sqlite3_column_* call of every row (a db.rows scan
/// spent 12 % of its samples in pthread_mutex_lock/unlock, issue 27's perf
/// 25 %). The watchdog, the
/// one other thread that uses the handle, is kept apart by the reader's own
/// lock instead: every use of the handle (a statement prepared, stepped,
/// its columns read, reset or finalized; a setting changed) is between
/// opsh_sql_reader_enter and opsh_sql_reader_leave, once per call or row
/// rather than once per SQLite call. sqlite3_interrupt needs no lock.
///
/// A `db.rows` loop is the exception: while one of its statements is open
/// on the handle, the watchdog leaves the handle alone (ending the read
/// transaction then would wait for the statement anyway), so the loop
/// steps and reads its rows without the lock, and only its finalize takes
/// it (opsh_sql_reader_cursor_opened, opsh_sql_reader_finalize_cursor).
typedef struct opsh_sql_reader {
    sqlite3 *handle;
    double window;
    /// Monotonic seconds when the snapshot began; 0 when there is none.
    double started;
    long write_count;
    /// `db.rows` statements open on the handle (under the lock).
    int open_cursors;
    /// Monotonic seconds when open_cursors last went from 0 to 1: an open
    /// statement's snapshot is at least that old, whatever `started` says
    /// (a write's new snapshot does not end a read statement's).
    double cursors_since;
    /// Set by the watchdog at each of its turns while `db.rows` statements
    /// hold a snapshot older than the window: a new nonzero number each
    /// time, 0 once none is open. A loop reads it once per row
    /// (__atomic_load_n, relaxed) and looks closer when it changed.
    int overdue;
    /// Monotonic seconds when `overdue` last changed (under the lock).
    double overdue_at;
    /// Opaque: the lock over `started` and the watchdog thread's state.
    void *watchdog;
} opsh_sql_reader;

/// A reader on `handle` (opened SQLITE_OPEN_NOMUTEX); its watchdog thread
/// starts with the first snapshot or `db.rows` statement. Free it with
/// opsh_sql_reader_free before closing the handle.
opsh_sql_reader *opsh_sql_reader_new(sqlite3 *handle, double window);
void opsh_sql_reader_free(opsh_sql_reader *reader);

/// Takes the reader's lock (the watchdog then waits): nestable, from any
/// thread. Nothing between enter and leave may unwind (a Lua error's
/// longjmp) nor wait for long. (A collection run there may call finalizers,
/// which nest: a cursor finalized takes the lock again.)
void opsh_sql_reader_enter(opsh_sql_reader *reader);
void opsh_sql_reader_leave(opsh_sql_reader *reader);

/// Call under the lock once a `db.rows` statement is prepared: one on the
/// reader's handle keeps the watchdog off the handle until
/// opsh_sql_reader_finalize_cursor.
void opsh_sql_reader_cursor_opened(opsh_sql_reader *reader, sqlite3_stmt *statement);
/// Finalizes a `db.rows` statement (under the lock, taken here); the last
/// one of an overdue snapshot ends it at once.
void opsh_sql_reader_finalize_cursor(opsh_sql_reader *reader, sqlite3_stmt *statement);

/// Keeps the current snapshot while it is fresh, else starts a new one.
void opsh_sql_reader_use_snapshot(opsh_sql_reader *reader, long write_count);
/// Ends the shared read transaction; 0 while a db.rows loop still reads
/// from it (it ends at the next chance).
int opsh_sql_reader_end_snapshot(opsh_sql_reader *reader);
