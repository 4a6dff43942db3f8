// How each column of a PostgreSQL DataRow is read: Store decides it per
// column from the row description (Store/PostgreSQL/WireLayout), the `db`
// module's C turns the bytes into Lua values by it (CSQLBridge/opsh_pg.c).
// Here, in Store's C, so that both see the one definition.
#pragma once

/// How a column's bytes become a Lua value: its type and the format it
/// came in (PostgresRowLayout). Store chooses one per column (its
/// WireLayout); anything without a kind of its own is OPSH_PG_TEXT.
enum opsh_pg_kind {
    OPSH_PG_TEXT = 0,
    OPSH_PG_BINARY_INT2,
    OPSH_PG_BINARY_INT4,
    OPSH_PG_BINARY_OID,
    OPSH_PG_BINARY_INT8,
    OPSH_PG_BINARY_FLOAT4,
    OPSH_PG_BINARY_FLOAT8,
    OPSH_PG_BINARY_BOOL,
    OPSH_PG_BINARY_BYTEA,
    /// int2, int4, int8 and oid in text (a statement's first run in a pipeline).
    OPSH_PG_TEXT_INTEGER,
    OPSH_PG_TEXT_FLOAT4,
    OPSH_PG_TEXT_FLOAT8,
    OPSH_PG_TEXT_BOOL,
    OPSH_PG_TEXT_BYTEA,
    /// numeric (always text): sum(bigint), avg, numeric(10,2).
    OPSH_PG_TEXT_NUMERIC,
};

