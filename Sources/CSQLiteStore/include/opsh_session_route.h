// Where the session's statements run now: what Store's SessionDatabase
// publishes (ARCHITECTURE.md, "Connections, by role") and the `db`
// module's C fast path reads before it steps a statement itself.
#pragma once
#include "opsh_reader.h"

typedef struct sqlite3 sqlite3;

typedef struct opsh_session_route {
    /// The connection of the open transaction, or NULL outside one.
    sqlite3 *transaction;
    /// While writes are counted against a cap (a dry run, a scope, a
    /// capped transaction) Swift runs them, checking the cap after each.
    int dry_run;
    /// Set when a write was stepped on `transaction` outside GRDB, so
    /// GRDB's observers are told at commit.
    int changed_outside;
    /// Writes this session made (the read snapshot must not predate them).
    long write_count;
    /// The read connection's shared snapshot; NULL for a database in memory.
    opsh_sql_reader *reader;
} opsh_session_route;

opsh_session_route *opsh_session_route_new(void);
void opsh_session_route_free(opsh_session_route *route);
