// Ctrl-C for a statement that had not started yet. sqlite3_interrupt stops
// only statements already running on a connection: a Ctrl-C that lands
// between a script's call and its first sqlite3_step was lost, and the
// statement then ran to its end. Every connection Store opens gets a
// progress handler that stops a statement stepped on the Lua thread while
// the Lua state's interrupt flag is set (the flag the runtime clears once
// the interrupted chunk has ended); other threads (a build's log writer)
// are never stopped by it.
#pragma once

typedef struct sqlite3 sqlite3;

/// Statements stepped on the calling thread stop while `*flag` (an
/// `atomic_int`) is not 0; NULL: never. One flag per process.
void opsh_stop_statements_when(const void *flag);
/// Installs the check on a connection (every 1,000 virtual machine steps).
void opsh_stop_statements_on(sqlite3 *db);
