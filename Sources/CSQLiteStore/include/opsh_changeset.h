// Changesets: what a transaction changed, row by row, in the format of
// SQLite's session extension (made by opsh_changes.h from the preupdate
// hook, which the extension would otherwise take: ARCHITECTURE.md,
// decision 6).
//
// The shell keeps one per committed chunk so that `undo()` can take it
// back, and uses one to re-apply a chunk after asking the operator,
// without holding the write lock while the operator thinks. Applying
// never overwrites another process's write: every conflict is collected
// and nothing is applied when there is one.
#pragma once

typedef struct sqlite3 sqlite3;

/// The changeset that undoes `bytes` (inserts become deletes, …).
int opsh_changeset_invert(int size, const void *bytes, int *inverted_size, void **inverted);

void opsh_changeset_free(void *bytes);

/// Calls `each` once per change: the table, the operation (SQLite's
/// SQLITE_INSERT, SQLITE_UPDATE or SQLITE_DELETE) and `context`.
int opsh_changeset_walk(int size, const void *bytes,
                        void (*each)(const char *table, int operation, void *context), void *context);

/// Applies `bytes` on `connection` inside a savepoint. Every conflict (a
/// row changed, deleted or inserted by someone else since, a constraint
/// or foreign key the change would break) is described, one line each, in
/// `*conflicts` (malloc'd, caller frees with `opsh_changeset_free`; NULL
/// when there was none) and counted in `*conflict_count`; when there is
/// any, the savepoint is rolled back and nothing is applied. Returns an
/// SQLite result code (SQLITE_OK also when conflicts rolled it back).
int opsh_changeset_apply(sqlite3 *connection, int size, const void *bytes,
                         int *conflict_count, char **conflicts);
