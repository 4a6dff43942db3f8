// Every row a writer connection changes, as SQLite's preupdate hook
// reports it, and (while asked) the rows as they were before, to make a
// changeset of the transaction (ARCHITECTURE.md, decision 6).
//
// Why the preupdate hook: it is the one hook SQLite calls for every row
// change, whichever statement made it (GRDB's, the `db` module's C path, a
// changeset applied, the job manager's) and however: the rows a REPLACE
// conflict resolution deletes and the rows of a DELETE without WHERE
// (SQLite does not take its truncate shortcut while the hook is set),
// which the update hook and GRDB's observers never hear of. SQLite allows
// one preupdate hook per connection and its session extension takes it,
// so the changesets are made here too, from the same hook: the first
// version of each row changed (keyed by its PRIMARY KEY) is kept, and the
// changeset compares it with the row as it is when asked, as the session
// extension does, so rows a savepoint rolled back drop out. An UPDATE's
// old and new records hold the whole row (the session extension keeps only
// the changed columns), so applying it later refuses a row another writer
// changed in any column.
#pragma once
#include <stdint.h>

typedef struct sqlite3 sqlite3;
typedef struct opsh_changes opsh_changes;

/// Rows changed in one table.
typedef struct opsh_change_count {
    /// The table's name (malloc'd with the array).
    char *table;
    /// 1: a TEMP table (or one of an attached database): not the database file's.
    int temporary;
    int64_t inserted;
    int64_t updated;
    int64_t deleted;
} opsh_change_count;

/// Counts the row changes of `connection` from now on (its preupdate hook).
/// NULL when out of memory.
opsh_changes *opsh_changes_install(sqlite3 *connection);
/// Frees the counter after its connection is closed or its hook removed.
void opsh_changes_free(opsh_changes *changes);
/// Removes the hook from the connection (before freeing an open one).
void opsh_changes_uninstall(opsh_changes *changes);

/// The counts so far (a copy, safe from any thread): the number of tables,
/// and the array in `*counts`, freed with opsh_changes_free_counts.
int opsh_changes_read(opsh_changes *changes, opsh_change_count **counts);
void opsh_changes_free_counts(opsh_change_count *counts, int count);
/// Forgets the counts (the transaction ended).
void opsh_changes_clear(opsh_changes *changes);
/// Adds to the counts (a dropped table's rows; a savepoint's mark restored).
void opsh_changes_add(opsh_changes *changes, const char *table, int temporary,
                      int64_t inserted, int64_t updated, int64_t deleted);

/// Starts keeping the first version of every row of `main` changed from
/// now on (forgetting what was kept before). Returns an SQLite result code.
int opsh_changes_record(opsh_changes *changes);
/// Stops and forgets what was kept.
void opsh_changes_stop_recording(opsh_changes *changes);
/// Whether rows are being kept.
int opsh_changes_is_recording(opsh_changes *changes);
/// The changeset from the kept rows to the rows as they are now, read on
/// the connection (inside its transaction): `*bytes` is sqlite3_malloc'd
/// (free it with sqlite3_free). Returns an SQLite result code.
int opsh_changes_changeset(opsh_changes *changes, int *size, void **bytes);
/// The first table with changed rows that could not be kept (no PRIMARY
/// KEY, hidden columns, its columns changed meanwhile); NULL when none.
/// Valid until the recording stops.
const char *opsh_changes_unrecorded(opsh_changes *changes);
