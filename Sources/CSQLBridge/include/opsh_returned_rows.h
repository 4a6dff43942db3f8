// A batch run's returned rows written as CSV or TSV straight from the
// statement (`opsh --csv -e "return db.query(...)"`): no Lua table per row
// (ARCHITECTURE.md, "The row path"; BENCHMARKS.md, issue 26's export).
//
// Two parts: the test that a db.query call's result is the chunk's own
// returned value and nothing else can see it (opsh_is_chunk_result), and
// the writer that steps the statement and writes the bytes
// (opsh_write_returned_rows). Swift (Bindings' ReturnedRows) decides,
// binds, and writes what C does not: every cell that is not plain ASCII.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "opsh_lua.h"
#include "opsh_sql_calls.h"

/// Bytes on their way to a file descriptor.
typedef struct opsh_byte_buffer {
    unsigned char *bytes;
    size_t count;
    size_t capacity;
} opsh_byte_buffer;

/// Appends `length` bytes; 0 when memory ran out.
int opsh_byte_buffer_append(opsh_byte_buffer *buffer, const void *bytes, size_t length);

/// Whether the C function running now (a `db.query`) was called by a
/// tail call of the outermost Lua function of the main thread: its
/// result is then what the chunk returns, and no Lua code can reach it.
/// By the bytecode of that function (exactly one call instruction, the
/// tail call, and no to-be-closed variable) and by the stack slot this
/// call's function occupies in that function's frame (the tail call's
/// register, so not a metamethod or hook called meanwhile). `cache`
/// holds the last function examined and its answer.
typedef struct opsh_chunk_result_cache {
    const void *function;
    /// A registry reference that keeps `function` alive, so its address
    /// names no other function while cached (0: none).
    int reference;
    int tail_register;  // -1: not a one-tail-call function
} opsh_chunk_result_cache;
int opsh_is_chunk_result(lua_State *L, opsh_chunk_result_cache *cache);

/// How the writer writes the rows of one statement.
typedef struct opsh_rows_writer {
    int descriptor;
    /// 0: CSV (RFC 4180 quoting), 1: TSV (PostgreSQL's text format).
    int tsv;
    /// Per column, nonzero: its text goes to `other` (a secret's mask).
    const unsigned char *delegated;
    /// Appends the field of a text or BLOB cell C does not write itself
    /// (bytes that are not printable ASCII, a delegated column); returns
    /// 0 to stop (memory).
    int (*other)(void *context, const unsigned char *bytes, size_t length, int column, opsh_byte_buffer *out);
    /// Called every 1,024 rows with the rows written so far (ProgressBar
    /// draws at most ten times a second).
    void (*progress)(void *context, int64_t rows);
    void *context;
    /// Out: rows written; the errno of a failed write (0: none).
    int64_t rows;
    int write_error;
} opsh_rows_writer;

/// Writes `header` (already a line's fields, without its newline), then
/// each row of `statement`, each line ending in a newline. Returns
/// SQLite's code of the last step: OPSH_SQLITE_DONE when every row was
/// written; -1 when a write failed (`write_error`) or memory ran out.
int opsh_write_returned_rows(sqlite3_stmt *statement, const unsigned char *header, size_t header_length,
                             opsh_rows_writer *writer);

/// The value a streamed `db.query` returns: the printer writes nothing
/// for it (the rows are written already).
void opsh_push_rows_written(lua_State *L);
int opsh_is_rows_written(lua_State *L, int index);
