// Where the session's statements run now: what Store's SessionDatabase
// publishes (ARCHITECTURE.md, "Connections, by role") and the `db`
// module's C fast path reads before it steps a statement itself.
#pragma once
#include "opsh_reader.h"
#include "opsh_sql_tally.h"

typedef struct sqlite3 sqlite3;

typedef struct opsh_session_route {
    /// The connection of the open transaction, or NULL outside one.
    sqlite3 *transaction;
    /// While writes are counted (a dry run, a scope) they go through GRDB,
    /// whose change counter sees them.
    int dry_run;
    /// Set when a write was stepped on `transaction` outside GRDB, so
    /// GRDB's observers are told at commit.
    int changed_outside;
    /// Writes this session made (the read snapshot must not predate them).
    long write_count;
    /// The read connection's shared snapshot; NULL for a database in memory.
    opsh_sql_reader *reader;
    /// Counts the rows that writes stepped outside GRDB change (the audit
    /// trail's per-table counts); NULL: not counted.
    opsh_sql_tally *tally;
} opsh_session_route;

opsh_session_route *opsh_session_route_new(void);
void opsh_session_route_free(opsh_session_route *route);
