// SQLite's allocator in this process: malloc, with a small per-thread
// cache of freed blocks in place of the lookaside Debian's SQLite omits
// (opsh_sqlite_memory.c says why). Set by opsh_sqlite_setup.c as the
// executable loads.
#pragma once

/// Makes SQLite allocate through the cache (SQLITE_CONFIG_MALLOC); nonzero
/// when SQLite took it. Only before SQLite is initialized.
int opsh_sqlite_use_block_cache(void);
