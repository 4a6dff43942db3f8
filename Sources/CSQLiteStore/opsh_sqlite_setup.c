// SQLite's process-wide settings, made as the executable loads, before
// anything can open a connection (sqlite3_config answers SQLITE_MISUSE
// once SQLite is initialized).
//
// Memory statistics off: Debian's SQLite keeps them (DEFAULT_MEMSTATUS),
// so every sqlite3_malloc and sqlite3_free takes SQLite's global memory
// mutex to count, and an insert allocates and frees a cursor and a record
// per statement run (SQLite is built without lookaside). opsh reads none
// of those counts (sqlite3_memory_used, sqlite3_status, heap limits):
// the --memory-limit is the Lua allocator's own (CLuaShim).
//
// SQLite's allocator: malloc with a per-thread cache of small freed blocks,
// for the lookaside Debian's build omits (opsh_sqlite_memory.c).
#include <sqlite3.h>
#include "opsh_sqlite_memory.h"
#include "opsh_sqlite_setup.h"

static int memory_statistics_off, block_cache_used;

__attribute__((constructor)) static void configure_sqlite(void) {
    memory_statistics_off = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK;
    block_cache_used = opsh_sqlite_use_block_cache();
}

int opsh_sqlite_memory_statistics_off(void) { return memory_statistics_off; }
int opsh_sqlite_block_cache_used(void) { return block_cache_used; }
