// Private to CSQLBridge's C files: a `db.rows` loop on the read connection
// whose snapshot is overdue (opsh_reader.h) reads the rest of its result
// into a private copy and finalizes its statement, so that a script's slow
// work per row does not pin the WAL (ARCHITECTURE.md, "The row path").
#pragma once
#include "opsh_sql.h"

/// What opsh_rows_spill returns when it failed (no SQLite code is negative).
#define OPSH_ROWS_SPILL_FAILED (-1)

/// Set in what opsh_rows_spill returns when the statement failed after the
/// rows it copied (no SQLite code reaches this bit): the failure's words
/// are pushed, for the loop to raise once it has read the copy's rows.
#define OPSH_ROWS_COPY_THEN_FAIL (1 << 24)

/// The most a copy holds, counted as its values' bytes (8 for a number) and
/// OPSH_ROWS_COPY_ROW_BYTES a row: twice the database (its file and its
/// WAL), and at least OPSH_ROWS_COPY_LEAST_MOST. A scan of the file's
/// tables fits (the backend bench's million demo rows); the rest of a
/// longer result stays with the loop's statement, read after the copy's
/// rows (`slot[2]`): a result without end (a recursive CTE the loop leaves
/// by `break`) was copied until the disk was full, and the loop never left.
#define OPSH_ROWS_COPY_LEAST_MOST ((size_t)64 << 20)
#define OPSH_ROWS_COPY_ROW_BYTES 16

/// The copy commits a batch at a time, counted as its most is: the rows of
/// a batch are held in memory (this much, and one row more) until their
/// commit, so that a write that fails gives them back (28c).
#define OPSH_ROWS_COPY_BATCH_BYTES ((size_t)1 << 20)

/// The loop's flag when its statement can never be overdue (not on the
/// read connection, or already a copy).
extern const int opsh_rows_never_overdue;

/// What a loop saw of the watchdog's marks: the mark seen last, the rows
/// it had asked for then, how many marks in a row found it slow, and the
/// rows asked for so far (counted by the loop, one increment a row).
typedef struct {
    int mark;
    int slow_marks;
    long long rows_at_mark;
    long long rows;
} opsh_rows_pace;

/// Where a loop began, for its note: the chunk and line of the function
/// that called `db.rows` (Lua's short source, as luaL_where gives it), read
/// once as the loop begins; `line` 0 when that was not a Lua function (the
/// loop's next row is asked then).
typedef struct {
    char source[LUA_IDSIZE];
    int line;
} opsh_rows_origin;

/// Reads `origin` from the function at `level` of L's stack.
void opsh_rows_origin_take(lua_State *L, int level, opsh_rows_origin *origin);

/// Called by a loop's next row when the reader's `overdue` (at `*overdue`)
/// is not the one it saw last (`pace->mark`): the watchdog found the loop's
/// snapshot older than the window. A mark finds the script slow when it
/// asked for fewer rows since the mark it saw before than
/// OPSH_ROWS_SLOW_PACE a second would give (its work per row is a process,
/// a job, a wait), or when it asked for this row more than
/// OPSH_ROWS_SLOW_TO_ASK seconds after the mark. Lateness alone missed a
/// steady loop: with 3 ms of work a row and a mark every 50 ms, the
/// lateness cycles through three values and is past 2 ms at one mark in
/// three, never at two in a row (WALTests.leavingARowsLoopClosesItsCopy
/// failed one run in three). At OPSH_ROWS_SLOW_MARKS slow marks in a row
/// (one may be the thread waiting for a CPU on a busy machine) the rest is
/// copied (opsh_rows_spill): `*overdue` then points to
/// opsh_rows_never_overdue and the copy's first step is returned. A loop
/// that asks for its rows at once keeps reading from its statement, as
/// db.query would (a copy would only slow a scan): `pace` is updated and
/// 0 returned.
int opsh_rows_when_overdue(lua_State *L, sqlite3_stmt **slot, opsh_sql_route *route, const int **overdue, opsh_rows_pace *pace,
                           const opsh_rows_origin *origin);

#define OPSH_ROWS_SLOW_TO_ASK 0.002
#define OPSH_ROWS_SLOW_PACE 20000.0
#define OPSH_ROWS_SLOW_MARKS 2

/// Steps `slot[0]` (a `db.rows` statement on the read connection) to its
/// end, copying every row into a temporary database of its own (on disk,
/// gone once closed: bounded memory), finalizes it, which ends the overdue
/// snapshot, and puts in `slot[0]` a statement over the copy that yields the
/// same columns and values, in the same order. Returns that statement's
/// first step (SQLITE_ROW, SQLITE_DONE, or SQLite's error), or
/// OPSH_ROWS_SPILL_FAILED with the failure text (the loop's SQL and its
/// error) pushed and the loop closed (`slot[0]` NULL); Ctrl-C and
/// --timeout stop it so. A failure of the statement after some rows
/// (another kind) is the loop's only after them: the copy's first step
/// with OPSH_ROWS_COPY_THEN_FAIL set, its words pushed. A rest longer than
/// the copy's most (see OPSH_ROWS_COPY_LEAST_MOST) is copied up to it and
/// the statement, still open, is read after the copy. A copy that cannot
/// be written (the temporary directory full, a file-size limit) is
/// abandoned: the loop reads the rows it committed, then the rows of the
/// batch whose write failed (held in memory, see
/// OPSH_ROWS_COPY_BATCH_BYTES), then the rest from its statement, still
/// open on its snapshot (28c); a copy that cannot even begin returns 0,
/// and the loop steps its statement as before. Each of these three keeps
/// the snapshot, and the WAL, until the loop ends, and says so in one
/// note (the route's `note`: where the loop began, from `origin`, why,
/// and that cost); a loop is copied once, so it says it once. What
/// follows `slot[0]`, in order, waits in `slot[2]` and `slot[3]` (`slot`
/// holds four; `slot[1]` is the cursor's).
int opsh_rows_spill(lua_State *L, sqlite3_stmt **slot, opsh_sql_route *route, const opsh_rows_origin *origin);
