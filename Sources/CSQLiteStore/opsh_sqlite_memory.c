// SQLite's memory, taken through a small per-thread cache of freed blocks
// (opsh_sqlite_memory.h). Why: SQLite's own answer to its many small,
// short-lived allocations is the lookaside, a per-connection pool, and
// Debian's SQLite is built without it (OMIT_LOOKASIDE). Every statement
// run allocates and frees at least a cursor and its record's buffer: an
// INSERT run from Lua made about 2.5 allocations and 2.8 frees, some 300
// instructions of malloc and free of the 6,500 a row takes (callgrind of
// bench/sql-workload's insert loop). A freed
// small block stays with the thread that freed it for the next request of
// its size class; larger ones go to malloc as before.
//
// Every block has a header: its usable size (SQLite's xSize) and its
// class. A thread keeps at most KEPT_PER_CLASS blocks of each class (about
// 33 KB in all) and hands them back to malloc when it ends; SQLite's page
// cache, whose pages are larger, is unchanged (--memory-limit sizes it).
#include <sqlite3.h>
#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "opsh_sqlite_memory.h"

enum { CLASS_COUNT = 4, KEPT_PER_CLASS = 32 };
static const size_t class_size[CLASS_COUNT] = {64, 128, 256, 512};

/// Before each block. 16 bytes, so the block keeps malloc's alignment.
typedef struct block_header {
    size_t size;
    /// The block's size class, or -1: malloc's (larger than the classes).
    ptrdiff_t size_class;
} block_header;
_Static_assert(sizeof(block_header) % alignof(max_align_t) == 0, "header keeps malloc's alignment");

typedef struct kept_block {
    struct kept_block *next;
} kept_block;

typedef struct thread_cache {
    kept_block *kept[CLASS_COUNT];
    int count[CLASS_COUNT];
    /// The thread's destructor is registered (it frees what is kept).
    int registered;
    /// The thread is ending: frees go to malloc.
    int closed;
} thread_cache;

static _Thread_local thread_cache cache;
static pthread_key_t cache_key;
static pthread_once_t cache_key_once = PTHREAD_ONCE_INIT;
static int cache_key_made;

static block_header *header_of(void *block) { return (block_header *)block - 1; }

static int class_of(size_t size) {
    if (size > 256) return size > 512 ? -1 : 3;
    if (size > 128) return 2;
    return size > 64 ? 1 : 0;
}

static void free_kept_blocks(void *unused) {
    (void)unused;
    cache.closed = 1;
    for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
        kept_block *block = cache.kept[size_class];
        while (block) {
            kept_block *next = block->next;
            free(header_of(block));
            block = next;
        }
        cache.kept[size_class] = NULL;
        cache.count[size_class] = 0;
    }
}

static void make_cache_key(void) { cache_key_made = pthread_key_create(&cache_key, free_kept_blocks) == 0; }

/// Whether this thread may keep blocks: only once its ending frees them.
static int thread_keeps_blocks(void) {
    if (cache.registered) return !cache.closed;
    pthread_once(&cache_key_once, make_cache_key);
    if (!cache_key_made || pthread_setspecific(cache_key, &cache) != 0) {
        cache.closed = 1;
        cache.registered = 1;
        return 0;
    }
    cache.registered = 1;
    return 1;
}

static void *block_malloc(int requested) {
    size_t size = (size_t)requested;
    int size_class = class_of(size);
    if (size_class >= 0) {
        kept_block *block = cache.kept[size_class];
        if (block) {
            cache.kept[size_class] = block->next;
            cache.count[size_class]--;
            return block;
        }
        size = class_size[size_class];
    }
    block_header *header = malloc(sizeof *header + size);
    if (!header) return NULL;
    header->size = size;
    header->size_class = size_class;
    return header + 1;
}

static void block_free(void *block) {
    block_header *header = header_of(block);
    ptrdiff_t size_class = header->size_class;
    if (size_class >= 0 && cache.count[size_class] < KEPT_PER_CLASS && thread_keeps_blocks()) {
        kept_block *kept = block;
        kept->next = cache.kept[size_class];
        cache.kept[size_class] = kept;
        cache.count[size_class]++;
        return;
    }
    free(header);
}

static void *block_realloc(void *block, int requested) {
    block_header *header = header_of(block);
    size_t size = (size_t)requested;
    if (header->size_class >= 0) {
        if (size <= header->size) return block;
        void *moved = block_malloc(requested);
        if (!moved) return NULL;
        memcpy(moved, block, header->size);
        block_free(block);
        return moved;
    }
    block_header *grown = realloc(header, sizeof *header + size);
    if (!grown) return NULL;
    grown->size = size;
    return grown + 1;
}

static int block_size(void *block) { return (int)header_of(block)->size; }
static int round_up(int size) { return (size + 7) & ~7; }
static int start(void *unused) { (void)unused; return SQLITE_OK; }
static void stop(void *unused) { (void)unused; }

int opsh_sqlite_use_block_cache(void) {
    static const sqlite3_mem_methods methods = {
        block_malloc, block_free, block_realloc, block_size, round_up, start, stop, NULL,
    };
    return sqlite3_config(SQLITE_CONFIG_MALLOC, &methods) == SQLITE_OK;
}
