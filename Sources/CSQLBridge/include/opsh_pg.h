// The `db` module's rows over PostgreSQL, in C: each DataRow's bytes, as
// PostgresWire hands them out (in place in its receive buffer, or kept by
// db.rows), become a row table without a Swift String or value in between.
//
// The values are the ones Store's PostgresDatabase.value and .number give
// (the Swift path the repositories and query keys take): integers exact as
// Lua integers, floats as numbers, booleans as 1 and 0, bytea as strings,
// numeric as an integer when it is one within 64 bits, else a finite
// number, else its text; every other type as its text (invalid UTF-8
// repaired as Swift's String(decoding:as:) repairs it), NULL absent.
// A test in BindingsTests compares both paths value by value.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "opsh_lua.h"
#include "opsh_wire_kind.h"

/// Pushes one value of kind `kind` (`length` >= 0 bytes at `bytes`).
void opsh_pg_push_value(lua_State *L, const unsigned char *bytes, size_t length, unsigned char kind);

/// Pushes a DataRow's body (as PostgresWire checked it: `column_count`
/// values, each within the body) as a row table of its non-NULL columns,
/// keyed by the names at stack index `names` (an array), with the
/// metatable at index `metatable`. Returns 0, having pushed nothing, if
/// the body is not such a row.
int opsh_pg_push_row(lua_State *L, const unsigned char *body, size_t length,
                     const unsigned char *kinds, int column_count, int names, int metatable);

/// Pushes the value of column `column` of a DataRow's body (nil for NULL).
/// Returns 0, having pushed nothing, if the body has no such column.
int opsh_pg_push_column(lua_State *L, const unsigned char *body, size_t length, unsigned char kind, int column);

// MARK: A result kept as received (db.rows)

/// The DataRow bodies of one result, one after another, in memory from
/// the Lua state's allocator (counted against its limit). A full userdata
/// owns it; its __gc frees the bytes.
typedef struct opsh_pg_rows opsh_pg_rows;

/// Pushes a new, empty row store (the userdata) and returns it.
opsh_pg_rows *opsh_pg_rows_new(lua_State *L);
/// Appends one DataRow body (copied). Returns 0 when memory ran out.
int opsh_pg_rows_append(opsh_pg_rows *rows, const void *body, size_t length);
/// How many rows it holds.
size_t opsh_pg_rows_count(const opsh_pg_rows *rows);
/// Sets how the rows' columns are read (copied); before pushing any.
/// Returns 0 when memory ran out.
int opsh_pg_rows_set_kinds(opsh_pg_rows *rows, const unsigned char *kinds, int column_count);

/// Pushes the iterator of a db.rows loop over the row store at stack index
/// `store`: each call returns the next row as a table (made then, so a
/// loop holds one row at a time), then nil; it frees the bytes once the
/// last row was returned.
void opsh_pg_push_rows_iterator(lua_State *L, int store, int names, int metatable);
