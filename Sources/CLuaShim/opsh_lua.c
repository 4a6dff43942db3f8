#include "opsh_lua.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

// Small blocks (strings, tables, their nodes, closures) come from pools of
// fixed-size cells kept per state: a script's garbage (a row table per
// iteration, a string per concatenation) is then reused at the cost of a
// list push and pop instead of malloc's bins and their consolidation. The
// cells stay with the state until it closes; larger blocks use malloc.
#define POOL_GRANULE 16
#define POOL_CLASSES 32                       // cells of 16 … 512 bytes
#define POOL_LARGEST (POOL_GRANULE * POOL_CLASSES)
#define POOL_SLAB (64 * 1024)

typedef struct pool_cell { struct pool_cell *next; } pool_cell;
typedef struct pool_slab { struct pool_slab *next; } pool_slab;

// Per state: the allocator's count and limit, its pools, whether a Swift
// frame is running, and the interrupt. Lives in the allocator's userdata.
typedef struct {
    // The count and the limit (0: none), together so that a loop can
    // read them through one pointer (opsh_memory_meter_of).
    opsh_memory_meter meter;
    // While a Swift function runs, allocations past the limit succeed: a
    // memory error there would longjmp across the Swift frame. The next
    // allocation Lua makes after the Swift frame has returned fails.
    int in_host;
    atomic_int interrupt_reason;
    pool_cell *free_cells[POOL_CLASSES];
    pool_slab *slabs;
    char *carve;        // the unused rest of the newest slab
    size_t carve_left;
    // The coroutine running now (NULL: the main thread), under the lock, so
    // that an interrupt from another thread can hook it (see Coroutines).
    atomic_flag running_lock;
    lua_State *running;
    // Interrupts since the interrupted chunk began: the first lets a
    // script's own __close handlers run, a second stops them too.
    atomic_int interrupts;
    // The Lua thread and stack depth of the __close handler the interrupt
    // lets run now (0: none); read and written by the hook, on that thread.
    lua_State *closing_thread;
    int closing_depth;
    // What stops SQL statements (SQLite's progress handler, opsh_stop.h):
    // the interrupt's reason, except while a __close handler the first
    // interrupt lets run runs (the statement it interrupted is stopped
    // already; the handler's own statements run, as after lua.c's first
    // Ctrl-C), until a second interrupt.
    atomic_int stop_statements;
} opsh_state_info;

static opsh_state_info *info_of(lua_State *L) {
    void *ud = NULL;
    lua_getallocf(L, &ud);
    return (opsh_state_info *)ud;
}

static size_t pool_class(size_t size) { return (size - 1) / POOL_GRANULE; }

static void *pool_take(opsh_state_info *info, size_t size) {
    size_t class = pool_class(size);
    pool_cell *cell = info->free_cells[class];
    if (cell) {
        info->free_cells[class] = cell->next;
        return cell;
    }
    size_t cell_size = (class + 1) * POOL_GRANULE;
    if (info->carve_left < cell_size) {
        pool_slab *slab = malloc(POOL_SLAB);
        if (!slab) return NULL;
        slab->next = info->slabs;
        info->slabs = slab;
        // The slab header takes one granule, so cells stay 16-aligned.
        info->carve = (char *)slab + POOL_GRANULE;
        info->carve_left = POOL_SLAB - POOL_GRANULE;
    }
    void *block = info->carve;
    info->carve += cell_size;
    info->carve_left -= cell_size;
    return block;
}

static void pool_give(opsh_state_info *info, void *block, size_t size) {
    pool_cell *cell = (pool_cell *)block;
    size_t class = pool_class(size);
    cell->next = info->free_cells[class];
    info->free_cells[class] = cell;
}

/// Frees `block` of `size` bytes, pooled or not.
static void release_block(opsh_state_info *info, void *block, size_t size) {
    if (size <= POOL_LARGEST) pool_give(info, block, size);
    else free(block);
}

static void *opsh_alloc_rest(opsh_state_info *info, void *ptr, size_t old, size_t nsize);

// Lua calls this for every object it makes and frees (a row table per
// iteration of a db.rows loop is six calls: the table and its node made
// and freed, and an empty array part "made" and "freed" as NULL): the
// common cases are handled here without a call, so the compiler keeps
// these paths short; the rest is opsh_alloc_rest.
static void *opsh_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    opsh_state_info *info = (opsh_state_info *)ud;
    if (!ptr) {
        // Nothing to make: an empty part (tested first, it is a third of
        // the calls in a db.rows loop).
        if (nsize == 0) return NULL;
        if (nsize <= POOL_LARGEST && (!info->meter.limit || info->in_host || info->meter.used + nsize <= info->meter.limit)) {
            size_t class = pool_class(nsize);
            pool_cell *cell = info->free_cells[class];
            if (cell) {
                info->free_cells[class] = cell->next;
                info->meter.used += nsize;
                return cell;
            }
        }
    } else if (nsize == 0) {
        // Lua passes the block's size as osize whenever ptr is a block.
        info->meter.used -= osize;
        if (osize <= POOL_LARGEST) pool_give(info, ptr, osize);
        else free(ptr);
        return NULL;
    }
    return opsh_alloc_rest(info, ptr, ptr ? osize : 0, nsize);
}

// Every other case of opsh_alloc: the limit refused, a new slab, malloc,
// a block grown or shrunk.
__attribute__((noinline)) static void *opsh_alloc_rest(opsh_state_info *info, void *ptr, size_t old, size_t nsize) {
    if (info->meter.limit && nsize > old && !info->in_host
        && info->meter.used - old + nsize > info->meter.limit) {
        return NULL;
    }
    void *block;
    if (ptr && old <= POOL_LARGEST && nsize <= POOL_LARGEST && pool_class(old) == pool_class(nsize)) {
        block = ptr;  // the same cell fits
    } else if (ptr && old > POOL_LARGEST && nsize > POOL_LARGEST) {
        block = realloc(ptr, nsize);
    } else {
        block = nsize <= POOL_LARGEST ? pool_take(info, nsize) : malloc(nsize);
        if (block && ptr) {
            memcpy(block, ptr, old < nsize ? old : nsize);
            release_block(info, ptr, old);
        }
    }
    if (block) info->meter.used = info->meter.used - old + nsize;
    return block;
}

static int opsh_panic(lua_State *L) {
    const char *message = lua_tostring(L, -1);
    fprintf(stderr, "opsh: unprotected Lua error: %s\n", message ? message : "(not a string)");
    abort();
}

lua_State *opsh_newstate(size_t memory_limit) {
    opsh_state_info *info = calloc(1, sizeof *info);
    if (!info) return NULL;
    info->meter.limit = memory_limit;
    lua_State *L = lua_newstate(opsh_alloc, info);
    if (!L) { free(info); return NULL; }
    lua_atpanic(L, opsh_panic);
    // Generational collection: most of a script's garbage dies young (a row
    // table per iteration of a db.rows loop, a string per "name" .. i), and
    // opsh's own state is small (its modules load lazily). The incremental
    // collector's cycles came every few dozen KB of garbage and marked and
    // swept everything each time; a minor collection visits the young
    // objects only. Major collections keep the heap within about twice
    // what survives, as the incremental default (pause 200) did
    // (BENCHMARKS.md, "Lua: SQL from scripts, side by side").
    lua_gc(L, LUA_GCGEN, 0, 0);
    return L;
}

void opsh_close(lua_State *L) {
    opsh_state_info *info = info_of(L);
    lua_close(L);
    // Every block is back in the pools: the slabs go.
    while (info->slabs) {
        pool_slab *next = info->slabs->next;
        free(info->slabs);
        info->slabs = next;
    }
    free(info);
}

size_t opsh_memory_used(lua_State *L) { return info_of(L)->meter.used; }
const opsh_memory_meter *opsh_memory_meter_of(lua_State *L) { return &info_of(L)->meter; }
void opsh_set_memory_limit(lua_State *L, size_t limit) { info_of(L)->meter.limit = limit; }

int opsh_memory_exceeded(lua_State *L) {
    opsh_state_info *info = info_of(L);
    if (!opsh_memory_may_exceed(&info->meter)) return 0;
    // Garbage counts until it is collected: only what is still held after
    // a full collection passes the limit (less the VM's headroom).
    lua_gc(L, LUA_GCCOLLECT);
    return opsh_memory_may_exceed(&info->meter);
}

void opsh_push_memory_refusal(lua_State *L, const char *what) {
    lua_pushfstring(L, "not enough memory (the memory limit is %I bytes): %s", (lua_Integer)info_of(L)->meter.limit, what);
}

int opsh_rows_pass_memory_limit(lua_State *L, int base, long long rows) {
    if (!opsh_memory_exceeded(L)) return 0;
    lua_settop(L, base);
    lua_gc(L, LUA_GCCOLLECT);
    char what[96];
    snprintf(what, sizeof what, "the rows of this query would pass it (stopped after %lld rows)", rows);
    opsh_push_memory_refusal(L, what);
    return 1;
}

// MARK: Calling Swift from Lua

static opsh_host_function host_dispatch = NULL;
static opsh_host_release host_release = NULL;

void opsh_set_host_dispatch(opsh_host_function dispatch, opsh_host_release release) {
    host_dispatch = dispatch;
    host_release = release;
}

// A full userdata holding a host pointer; its __gc releases the pointer.
typedef struct { void *context; } opsh_host_box;

static int opsh_release_box(lua_State *L) {
    opsh_host_box *box = (opsh_host_box *)lua_touserdata(L, 1);
    if (box && box->context) {
        void *context = box->context;
        box->context = NULL;
        host_release(context);
    }
    return 0;
}

static void push_box(lua_State *L, void *context) {
    opsh_host_box *box = (opsh_host_box *)lua_newuserdatauv(L, sizeof *box, 0);
    box->context = context;
}

int opsh_enter_host(lua_State *L) {
    opsh_state_info *info = info_of(L);
    int outer = info->in_host;
    info->in_host = 1;
    return outer;
}

void opsh_leave_host(lua_State *L, int outer) { info_of(L)->in_host = outer; }

int *opsh_host_flag(lua_State *L) { return &info_of(L)->in_host; }

int opsh_raise_where(lua_State *L) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
    return lua_error(L);
}

// While a host function ran, its allocations passed the limit (a memory
// error there would unwind its frame). Now that it has returned, what it
// pushed counts: a state still over the limit after a full collection
// drops the results and raises the limit's error, so values that bindings
// push (a 100 MB BLOB, a million rows) cannot bypass --memory-limit.
static int keep_results_within_limit_of(lua_State *L, opsh_state_info *info, int results) {
    if (!info->meter.limit || info->meter.used <= info->meter.limit || info->in_host) return results;
    lua_gc(L, LUA_GCCOLLECT);
    if (info->meter.used <= info->meter.limit) return results;
    lua_pop(L, results);
    lua_gc(L, LUA_GCCOLLECT);
    opsh_push_memory_refusal(L, "what this call returned would pass it");
    return opsh_raise_where(L);
}

static int keep_results_within_limit(lua_State *L, int results) {
    return keep_results_within_limit_of(L, info_of(L), results);
}

static int opsh_trampoline(lua_State *L) {
    opsh_host_box *box = (opsh_host_box *)lua_touserdata(L, lua_upvalueindex(1));
    int outer = opsh_enter_host(L);
    int results = host_dispatch(L, box->context);
    opsh_leave_host(L, outer);
    // The Swift frame has returned: raising is safe now.
    if (results == OPSH_RAISE) return opsh_raise_where(L);
    if (results == OPSH_RAISE_VALUE) return lua_error(L);
    return keep_results_within_limit(L, results);
}

void opsh_push_host_function(lua_State *L, void *context) {
    push_box(L, context);
    if (luaL_newmetatable(L, "opsh.function")) {
        lua_pushcfunction(L, opsh_release_box);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_pushcclosure(L, opsh_trampoline, 1);
}

typedef struct {
    opsh_fast_path fast;
    void *data;
    // The state's record, found once: a db.exec in a loop runs this per row.
    opsh_state_info *info;
} opsh_fast_binding;

static int opsh_fast_trampoline(lua_State *L) {
    const opsh_fast_binding *binding = (const opsh_fast_binding *)lua_touserdata(L, lua_upvalueindex(2));
    opsh_state_info *info = binding->info;
    int outer = info->in_host;
    info->in_host = 1;
    int results = binding->fast(L, binding->data);
    info->in_host = outer;
    if (results == OPSH_DECLINE) return opsh_trampoline(L);
    if (results == OPSH_RAISE) return opsh_raise_where(L);
    return keep_results_within_limit_of(L, info, results);
}

void opsh_push_host_function_fast(lua_State *L, void *context, opsh_fast_path fast, void *data) {
    push_box(L, context);
    if (luaL_newmetatable(L, "opsh.function")) {
        lua_pushcfunction(L, opsh_release_box);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    opsh_fast_binding *binding = (opsh_fast_binding *)lua_newuserdatauv(L, sizeof *binding, 0);
    binding->fast = fast;
    binding->data = data;
    binding->info = info_of(L);
    lua_pushcclosure(L, opsh_fast_trampoline, 2);
}

int opsh_push_host_object(lua_State *L, void *context, const char *type_name) {
    push_box(L, context);
    int created = luaL_newmetatable(L, type_name);
    if (created) {
        lua_pushcfunction(L, opsh_release_box);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    if (created) luaL_getmetatable(L, type_name);
    return created;
}

void *opsh_to_host_object(lua_State *L, int index, const char *type_name) {
    opsh_host_box *box = (opsh_host_box *)luaL_testudata(L, index, type_name);
    return box ? box->context : NULL;
}

// MARK: Calling Lua from Swift

// As lua.c's msghandler: a message with a traceback.
static int opsh_message_handler(lua_State *L) {
    const char *message = lua_tostring(L, 1);
    if (message == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            return 1;
        message = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, message, 1);
    return 1;
}

int opsh_pcall(lua_State *L, int nargs, int nresults) {
    opsh_state_info *info = info_of(L);
    int outer = info->in_host;
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, opsh_message_handler);
    lua_insert(L, base);
    info->in_host = 0;
    int status = lua_pcall(L, nargs, nresults, base);
    info->in_host = outer;
    lua_remove(L, base);
    return status;
}

int opsh_load(lua_State *L, const char *code, size_t length, const char *chunkname, const char *mode) {
    opsh_state_info *info = info_of(L);
    int outer = info->in_host;
    info->in_host = 0;
    int status = luaL_loadbufferx(L, code, length, chunkname, mode);
    info->in_host = outer;
    return status;
}

int opsh_is_incomplete(lua_State *L, int status) {
    static const char eof_mark[] = "<eof>";
    const size_t mark_length = sizeof eof_mark - 1;
    if (status != LUA_ERRSYNTAX) return 0;
    size_t length;
    const char *message = lua_tolstring(L, -1, &length);
    return message && length >= mark_length
        && strcmp(message + length - mark_length, eof_mark) == 0;
}

// MARK: Interrupts

// The registry key of the functions an interrupt lets run (a set).
static const char runs_despite_interrupt_key = 0;

void opsh_run_despite_interrupt(lua_State *L, int index) {
    index = lua_absindex(L, index);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &runs_despite_interrupt_key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &runs_despite_interrupt_key);
    }
    lua_pushvalue(L, index);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

// Whether the function the call hook `ar` is about is one of those.
static int runs_despite_interrupt(lua_State *L, lua_Debug *ar) {
    if (ar->event != LUA_HOOKCALL && ar->event != LUA_HOOKTAILCALL) return 0;
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &runs_despite_interrupt_key) != LUA_TTABLE) {
        lua_pop(L, 1);
        return 0;
    }
    lua_getinfo(L, "f", ar);
    int listed = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 2);
    return listed;
}

// Frames on `L`'s stack, the hooked function's included.
static int stack_depth(lua_State *L) {
    lua_Debug frame;
    int depth = 0;
    while (lua_getstack(L, depth, &frame)) depth++;
    return depth;
}

// Whether the call hook `ar` is about a function called with a value whose
// __close it is: a to-be-closed variable being closed as the stack unwinds.
static int closes_its_first_argument(lua_State *L, lua_Debug *ar) {
    if (ar->event != LUA_HOOKCALL) return 0;
    if (lua_getlocal(L, ar, 1) == NULL) return 0;
    if (luaL_getmetafield(L, -1, "__close") == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    lua_getinfo(L, "f", ar);
    int closes = lua_rawequal(L, -1, -2);
    lua_pop(L, 3);
    return closes;
}

// The __close handler the interrupt let run has ended: statements stop
// again while the interrupt unwinds.
static void closed(opsh_state_info *info) {
    info->closing_depth = 0;
    atomic_store(&info->stop_statements, atomic_load(&info->interrupt_reason));
}

// Whether the hooked code is a script's own __close handler (or what it
// calls) that the interrupt lets run, as lua.c's first Ctrl-C does: an
// operator's handler releases a lease or a lock file. Only until its
// return, and not after a second interrupt (a handler that loops for ever
// can still be stopped).
static int inside_a_close_handler(lua_State *L, lua_Debug *ar) {
    opsh_state_info *info = info_of(L);
    if (atomic_load(&info->interrupts) > 1) return 0;
    if (info->closing_depth > 0 && info->closing_thread == L) {
        int depth = stack_depth(L);
        int is_call = ar->event == LUA_HOOKCALL || ar->event == LUA_HOOKTAILCALL;
        if (depth > info->closing_depth || (depth == info->closing_depth && !is_call)) {
            if (depth == info->closing_depth && ar->event == LUA_HOOKRET) closed(info);
            return 1;
        }
        // Below it, or another function at its depth: it has ended (by an
        // error, which has no return event).
        closed(info);
    }
    if (!closes_its_first_argument(L, ar)) return 0;
    info->closing_thread = L;
    info->closing_depth = stack_depth(L);
    atomic_store(&info->stop_statements, 0);
    return 1;
}

static void opsh_interrupt_hook(lua_State *L, lua_Debug *ar) {
    if (atomic_load(&info_of(L)->interrupt_reason) == 0) {
        lua_sethook(L, NULL, 0, 0);
        return;
    }
    // A to-be-closed value's __close runs as the interrupt unwinds: stopped
    // at its call, the resource it releases stayed held (a db.rows cursor's
    // statement kept the read connection's snapshot, and SQLite's interrupt
    // with it, after Ctrl-C). It raises on its return instead.
    if (runs_despite_interrupt(L, ar)) return;
    if (inside_a_close_handler(L, ar)) return;
    // Keep the hook: a pcall that catches this gets it again on its next
    // instruction, until the host's own protected call has returned.
    lua_pushliteral(L, "interrupted");
    lua_error(L);
}

static void lock_running(opsh_state_info *info) {
    while (atomic_flag_test_and_set_explicit(&info->running_lock, memory_order_acquire)) {}
}

static void unlock_running(opsh_state_info *info) {
    atomic_flag_clear_explicit(&info->running_lock, memory_order_release);
}

// Hooks every call, return and instruction of `L`'s thread until the
// interrupt is raised: the next one of them stops the code.
static void hook_for_interrupt(lua_State *L) {
    lua_sethook(L, opsh_interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

void opsh_interrupt(lua_State *L, int reason) {
    opsh_state_info *info = info_of(L);
    atomic_fetch_add(&info->interrupts, 1);
    atomic_store(&info->interrupt_reason, reason);
    atomic_store(&info->stop_statements, reason);
    // lua_sethook is safe to call asynchronously (lua.c does it from its
    // SIGINT handler).
    hook_for_interrupt(L);
    // Hooks belong to one Lua thread: the coroutine running now needs its
    // own, or a loop inside it never stops. The lock keeps it alive meanwhile.
    lock_running(info);
    if (info->running) {
        hook_for_interrupt(info->running);
    }
    unlock_running(info);
}

// MARK: Coroutines
//
// coroutine.resume and the functions coroutine.wrap returns are wrapped to
// record which coroutine runs, so that opsh_interrupt can hook it: before,
// `coroutine.wrap(function() while true do end end)()` ran past --timeout,
// Ctrl-C and SIGTERM for ever. No hook is set until an interrupt, so code
// in coroutines runs at full speed.

// Runs upvalue 1 (the original function) with the arguments while `co` is
// recorded as running; errors pass through unchanged.
static int call_recording(lua_State *L, lua_State *co) {
    opsh_state_info *info = info_of(L);
    lock_running(info);
    lua_State *previous = info->running;
    info->running = co;
    unlock_running(info);
    // An interrupt that came just before: hook it now.
    if (co && atomic_load(&info->interrupt_reason) != 0) {
        hook_for_interrupt(co);
    }
    int count = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    int status = lua_pcall(L, count, LUA_MULTRET, 0);
    lock_running(info);
    info->running = previous;
    unlock_running(info);
    if (status != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

static int opsh_coroutine_resume(lua_State *L) {
    return call_recording(L, lua_type(L, 1) == LUA_TTHREAD ? lua_tothread(L, 1) : NULL);
}

// Upvalue 1: the function the original coroutine.wrap made; 2: its thread.
static int opsh_coroutine_wrapped(lua_State *L) {
    return call_recording(L, lua_tothread(L, lua_upvalueindex(2)));
}

// Upvalue 1: the original coroutine.wrap.
static int opsh_coroutine_wrap(lua_State *L) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    // The original's closure holds its coroutine as upvalue 1.
    if (lua_getupvalue(L, -1, 1) == NULL) return 1;
    if (lua_type(L, -1) != LUA_TTHREAD) {
        lua_pop(L, 1);
        return 1;
    }
    lua_pushcclosure(L, opsh_coroutine_wrapped, 2);
    return 1;
}

static void guard_coroutines(lua_State *L) {
    if (lua_getglobal(L, LUA_COLIBNAME) != LUA_TTABLE) {
        lua_pop(L, 1);
        return;
    }
    lua_getfield(L, -1, "resume");
    lua_pushcclosure(L, opsh_coroutine_resume, 1);
    lua_setfield(L, -2, "resume");
    lua_getfield(L, -1, "wrap");
    lua_pushcclosure(L, opsh_coroutine_wrap, 1);
    lua_setfield(L, -2, "wrap");
    lua_pop(L, 1);
}

int opsh_interrupt_reason(lua_State *L) { return atomic_load(&info_of(L)->interrupt_reason); }

const void *opsh_interrupt_flag(lua_State *L) { return &info_of(L)->stop_statements; }

void opsh_clear_interrupt(lua_State *L) {
    opsh_state_info *info = info_of(L);
    atomic_store(&info->interrupt_reason, 0);
    atomic_store(&info->stop_statements, 0);
    atomic_store(&info->interrupts, 0);
    info->closing_depth = 0;
    lua_sethook(L, NULL, 0, 0);
}

// MARK: Macros as functions

int opsh_upvalueindex(int i) { return lua_upvalueindex(i); }
int opsh_registryindex(void) { return LUA_REGISTRYINDEX; }
void opsh_pop(lua_State *L, int n) { lua_pop(L, n); }
void opsh_newtable(lua_State *L) { lua_newtable(L); }
const char *opsh_tostring(lua_State *L, int index, size_t *length) { return lua_tolstring(L, index, length); }
lua_Integer opsh_tointeger(lua_State *L, int index, int *isnum) { return lua_tointegerx(L, index, isnum); }
lua_Number opsh_tonumber(lua_State *L, int index, int *isnum) { return lua_tonumberx(L, index, isnum); }
void opsh_insert(lua_State *L, int index) { lua_insert(L, index); }
void opsh_remove(lua_State *L, int index) { lua_remove(L, index); }
void opsh_pushglobaltable(lua_State *L) { lua_pushglobaltable(L); }
int opsh_ref(lua_State *L) { return luaL_ref(L, LUA_REGISTRYINDEX); }
void opsh_unref(lua_State *L, int ref) { luaL_unref(L, LUA_REGISTRYINDEX, ref); }
int opsh_getref(lua_State *L, int ref) { return lua_rawgeti(L, LUA_REGISTRYINDEX, ref); }
void opsh_where(lua_State *L, int level) { luaL_where(L, level); }

static void require_library(lua_State *L, const char *name, lua_CFunction open) {
    luaL_requiref(L, name, open, 1);
    lua_pop(L, 1);
}

static void remove_field(lua_State *L, const char *table, const char *field) {
    if (lua_getglobal(L, table) == LUA_TTABLE) {
        lua_pushnil(L);
        lua_setfield(L, -2, field);
    }
    lua_pop(L, 1);
}

void opsh_openlibs(lua_State *L, int sandbox) {
    if (!sandbox) {
        luaL_openlibs(L);
        guard_coroutines(L);
        return;
    }
    require_library(L, LUA_GNAME, luaopen_base);
    require_library(L, LUA_STRLIBNAME, luaopen_string);
    require_library(L, LUA_TABLIBNAME, luaopen_table);
    require_library(L, LUA_MATHLIBNAME, luaopen_math);
    require_library(L, LUA_UTF8LIBNAME, luaopen_utf8);
    require_library(L, LUA_COLIBNAME, luaopen_coroutine);
    require_library(L, LUA_OSLIBNAME, luaopen_os);
    // Files and processes: gone. Bytecode: gone (it can break the VM).
    static const char *const base_removed[] = {"dofile", "loadfile", NULL};
    for (const char *const *name = base_removed; *name; name++) {
        lua_pushnil(L);
        lua_setglobal(L, *name);
    }
    static const char *const os_removed[] = {
        "execute", "exit", "getenv", "remove", "rename", "setlocale", "tmpname", NULL};
    for (const char *const *name = os_removed; *name; name++) remove_field(L, "os", *name);
    remove_field(L, "string", "dump");
    guard_coroutines(L);
    // The string metatable's __index is the string table itself: removing
    // `dump` above removes it from ("").dump as well.
}

// Tables nested deeper than this are called different (a value fetched
// from SQL is a list of rows: two levels).
#define OPSH_EQUAL_DEPTH 64

static int data_equal(lua_State *L, int a, int b, int depth) {
    a = lua_absindex(L, a);
    b = lua_absindex(L, b);
    int type = lua_type(L, a);
    if (type != lua_type(L, b)) return 0;
    if (type != LUA_TTABLE) {
        // 1 and 1.0 are the same number to Lua, but not the same value
        // in a column: an INTEGER that became a REAL changed.
        if (type == LUA_TNUMBER && lua_isinteger(L, a) != lua_isinteger(L, b)) return 0;
        return lua_rawequal(L, a, b);
    }
    if (lua_rawequal(L, a, b)) return 1;
    if (depth > OPSH_EQUAL_DEPTH || !lua_checkstack(L, 4)) return 0;
    if (lua_rawlen(L, a) != lua_rawlen(L, b)) return 0;
    lua_Integer keys = 0;
    lua_pushnil(L);
    while (lua_next(L, a)) {
        keys++;
        lua_pushvalue(L, -2);
        lua_rawget(L, b);
        if (lua_isnil(L, -1) || !data_equal(L, -2, -1, depth + 1)) {
            lua_pop(L, 3);
            return 0;
        }
        lua_pop(L, 2);
    }
    lua_pushnil(L);
    while (lua_next(L, b)) {
        keys--;
        lua_pop(L, 1);
    }
    return keys == 0;
}

int opsh_lua_data_equal(lua_State *L) {
    lua_settop(L, 2);
    lua_pushboolean(L, data_equal(L, 1, 2, 0));
    return 1;
}

int opsh_stdout_failure(void) {
    errno = 0;
    int flushed = fflush(stdout) == 0;
    if (flushed && !ferror(stdout)) return 0;
    return errno != 0 ? errno : -1;
}
