// Private to CSQLBridge's C files: the count of rows built into Lua
// tables, which a progress line reads from another thread
// (opsh_rows_built() in opsh_sql.h). One thread builds rows, so a relaxed
// load and store is enough; no read-modify-write on the row path.
#include <stdatomic.h>

extern _Atomic unsigned long opsh_rows_built_counter;

static inline void opsh_count_row(void) {
    atomic_store_explicit(&opsh_rows_built_counter,
                          atomic_load_explicit(&opsh_rows_built_counter, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
