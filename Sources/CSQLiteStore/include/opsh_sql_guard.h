// The statement guard: what a prepared statement does to transactions and
// to the schema, as SQLite itself compiled it.
//
// Why not the statement's words: "/* */ COMMIT", "end", "COMMIT TRANSACTION"
// and "DELETE …; COMMIT" all end a transaction, and a check of the first
// word let them through (a --dry-run kept its writes). Why not the
// authorizer, SQLite's own answer to "what does this statement do": GRDB
// registers its authorizer once per connection it opens and its
// transaction observers depend on it (replacing it breaks the counts and
// `watch`), and the script's SQL reaches those connections (the store's
// writer, the session's own) as well as the read connection opsh opens
// itself. So the guard reads the statement's own program (EXPLAIN of the
// statement's text on the same connection), which SQLite derives from the
// same parse the authorizer sees:
//
// - BEGIN, COMMIT, END, ROLLBACK compile to AutoCommit, SAVEPOINT, RELEASE,
//   ROLLBACK TO to Savepoint, whatever the spelling;
// - every schema change (CREATE, DROP or ALTER of a table, index, view or
//   trigger, TEMP ones included, and what a table-valued ANALYZE creates)
//   writes the schema cookie: SetCookie with P2 = 1 (BTREE_SCHEMA_VERSION),
//   P1 the database;
// - a CREATE … IF NOT EXISTS of an object that exists, or DROP … IF EXISTS
//   of one that does not, compiles to a program that only verifies the
//   schema (Transaction, and for tables, views and indexes SQLite's
//   JournalMode query that keeps it from counting as read-only): SQLite
//   prepares it again when the schema changes, and then it would change
//   the schema, so the sandbox refuses it too;
// - DROP TABLE names the table it drops in DropTable's P4 (P1 the
//   database) and destroys its b-tree (Destroy; a view has none): its rows
//   are counted as deleted;
// - CREATE TEMP TABLE and CREATE TEMP VIEW have SQLite read the new
//   object into the temp schema (ParseSchema with P1 = 1 and P4, written by
//   SQLite, `tbl_name='<name, quotes doubled>' AND type!='trigger'`); a
//   virtual TEMP table is made by VCreate (P1 = 1, P2 the register SQLite
//   loaded its name into);
// - ALTER TABLE … RENAME TO of a TEMP table calls sqlite_rename_table and
//   reads again the temp schema only (ParseSchema P1 = 1, no P4), where a
//   table of the file reads main's too (ParseSchema P1 = 0).
#pragma once

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

typedef struct opsh_sql_effects {
    /// BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT or RELEASE.
    int transaction_control;
    /// Writes the schema cookie of some database (main, temp).
    int schema_change;
    /// Of the database file (not temp).
    int schema_change_main;
    /// Does nothing now but would change the schema once it is prepared
    /// again (CREATE … IF NOT EXISTS / DROP … IF EXISTS).
    int dormant_schema_change;
    /// The tables of `main` it drops, each name NUL-terminated, the list
    /// ending with an empty name; NULL when none (free with
    /// opsh_sql_effects_free).
    char *dropped_tables;
    /// The TEMP tables and views it creates, as dropped_tables (free with
    /// opsh_sql_effects_free).
    char *temp_tables_created;
    /// Renames a TEMP table (its new name is not in the program).
    int renames_temp_table;
} opsh_sql_effects;

/// Classifies `statement` (prepared on `connection`): 0 when it did, -1
/// when SQLite could not compile its EXPLAIN (the caller refuses). Only
/// statements without result columns are compiled again (queries,
/// RETURNING and most PRAGMAs change no transaction and no schema, and
/// cost nothing extra). An EXPLAIN statement runs nothing.
int opsh_sql_classify(sqlite3 *connection, sqlite3_stmt *statement, opsh_sql_effects *effects);
void opsh_sql_effects_free(opsh_sql_effects *effects);

/// 1 when `statement` is transaction control, 0 when it is not, -1 when
/// SQLite could not say (the fuzz target's entry point).
int opsh_sql_is_transaction_control(sqlite3 *connection, sqlite3_stmt *statement);

/// Turns on SQLITE_DBCONFIG_DEFENSIVE (no writable_schema, no edits of
/// the schema tables): the sandbox's triggers cannot be edited away.
int opsh_sql_set_defensive(sqlite3 *connection);
