// SQLite's process-wide settings (sqlite3_config), made once before any
// connection opens: sqlite3_config is refused once SQLite is initialized.
#pragma once

/// Nonzero when SQLite keeps no memory statistics in this process
/// (SQLITE_CONFIG_MEMSTATUS off, set as the executable loads).
int opsh_sqlite_memory_statistics_off(void);

/// Nonzero when SQLite allocates through opsh's per-thread cache of small
/// blocks (opsh_sqlite_memory.h), set as the executable loads.
int opsh_sqlite_block_cache_used(void);
