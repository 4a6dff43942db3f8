// Rows changed per table by statements the `db` module steps itself on the
// writer connection (the fast path, and Swift's raw steps): GRDB's
// transaction observers never hear of those, so the audit trail's counts
// come from SQLite's update hook, armed only around such a step (GRDB
// installs its own update hook around the statements it executes, and
// leaves none in between).
#pragma once
#include <stdint.h>

typedef struct sqlite3 sqlite3;

typedef struct opsh_sql_tally_entry {
    char *table;
    int64_t inserted;
    int64_t updated;
    int64_t deleted;
} opsh_sql_tally_entry;

typedef struct opsh_sql_tally {
    opsh_sql_tally_entry *entries;
    int count;
    int capacity;
    /// The entry the last change went to (a loop writes one table).
    int last;
    /// The connection the counts are from (the last armed).
    sqlite3 *connection;
} opsh_sql_tally;

opsh_sql_tally *opsh_sql_tally_new(void);
void opsh_sql_tally_free(opsh_sql_tally *tally);
/// Forgets every count.
void opsh_sql_tally_clear(opsh_sql_tally *tally);
/// Adds counts to `table` (Swift restores a savepoint's mark with it).
void opsh_sql_tally_add(opsh_sql_tally *tally, const char *table, int64_t inserted, int64_t updated, int64_t deleted);
/// Counts the rows of the main schema the next steps on `connection`
/// change, until opsh_sql_tally_disarm. Does nothing when `tally` is NULL.
void opsh_sql_tally_arm(opsh_sql_tally *tally, sqlite3 *connection);
void opsh_sql_tally_disarm(opsh_sql_tally *tally, sqlite3 *connection);
