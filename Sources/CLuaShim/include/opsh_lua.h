// The C side of the Lua bridge.
//
// Swift cannot call Lua's API macros, and must never be unwound by
// `lua_error` (a longjmp). This shim gives Swift:
//  - the macros as functions;
//  - a state with a counting allocator (memory limit) and an interrupt flag;
//  - the trampoline through which Lua calls Swift: Swift returns a status,
//    and the trampoline raises the Lua error once the Swift frame is gone;
//  - protected calls with a traceback message handler;
//  - an interrupt that Lua code cannot swallow with pcall.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <lua5.4/lua.h>
#include <lua5.4/lualib.h>
#include <lua5.4/lauxlib.h>

// MARK: The state

/// Creates a state with opsh's allocator. `memory_limit` 0 means none.
lua_State *opsh_newstate(size_t memory_limit);
void opsh_close(lua_State *L);
/// Bytes the state holds now.
size_t opsh_memory_used(lua_State *L);
void opsh_set_memory_limit(lua_State *L, size_t limit);
/// Inside a host function or a fast path (where allocations past the
/// limit succeed), whether the state holds more than its limit, less
/// OPSH_MEMORY_HEADROOM, even after a full collection. The loops that make
/// a result's rows ask after each row, so a result larger than the limit
/// is refused while it is made, not once it is whole (ARCHITECTURE.md, decision 9; docs/operations.md's
/// bound of the process's own size plus twice the limit). 0 without a limit.
int opsh_memory_exceeded(lua_State *L);
/// The allocator's count and limit, for a loop that checks the limit once
/// a row (db.rows's iterator): opsh_memory_may_exceed reads them without a
/// call, and only a state over its limit pays for opsh_memory_exceeded's
/// collection.
typedef struct {
    size_t used;
    size_t limit;  // 0: none
} opsh_memory_meter;
const opsh_memory_meter *opsh_memory_meter_of(lua_State *L);
/// The room a check of the limit leaves below it: Lua's own bookkeeping
/// between two host calls (a CallInfo, the stack grown again after a
/// collection shrank both) is allocated outside any host frame, where the
/// limit refuses with Lua's bare "not enough memory". A loop that stopped
/// just under the limit let that allocation fail instead of saying the
/// limit's words (RowsLoopMemoryLimitTests).
#define OPSH_MEMORY_HEADROOM ((size_t)64 * 1024)
static inline int opsh_memory_may_exceed(const opsh_memory_meter *meter) {
    return meter->limit && meter->used + OPSH_MEMORY_HEADROOM > meter->limit;
}
/// Pushes "not enough memory (the memory limit is N bytes): " followed by
/// `what`: the words every refusal of the limit uses.
void opsh_push_memory_refusal(lua_State *L, const char *what);
/// For a loop that has made `rows` rows of a result on the stack above
/// `base`: 0 while the state is within its limit; else the partial result
/// is dropped (the stack set back to `base` and collected) and the
/// refusal is pushed ("… the rows of this query would pass it (stopped
/// after N rows)"), and 1 is returned.
int opsh_rows_pass_memory_limit(lua_State *L, int base, long long rows);

// MARK: Calling Swift from Lua

/// What a Swift function returns to its trampoline: a count of results
/// (>= 0), or OPSH_RAISE when the value on top of the stack is an error to
/// raise with the caller's position, or OPSH_RAISE_VALUE to raise it as is.
#define OPSH_RAISE (-1)
#define OPSH_RAISE_VALUE (-2)

/// The one entry point into Swift; `context` identifies the function.
typedef int (*opsh_host_function)(lua_State *L, void *context);
/// Releases a context when Lua collects the function or object holding it.
typedef void (*opsh_host_release)(void *context);
void opsh_set_host_dispatch(opsh_host_function dispatch, opsh_host_release release);
/// Pushes a Lua function that calls the host dispatch with `context`.
/// Lua owns `context` from then on and releases it when it collects the
/// function.
void opsh_push_host_function(lua_State *L, void *context);
/// A C fast path for a host function: it handles the common case without
/// entering Swift. It returns a count of results (>= 0), OPSH_RAISE with
/// an error message on top of the stack, or OPSH_DECLINE to leave the call
/// to the Swift function (with the stack as it found it). Allocations past
/// the memory limit succeed while it runs, as in Swift: it must not be
/// unwound halfway through a statement.
#define OPSH_DECLINE (-3)
typedef int (*opsh_fast_path)(lua_State *L, void *data);
/// As opsh_push_host_function, with `fast` tried first on each call.
void opsh_push_host_function_fast(lua_State *L, void *context, opsh_fast_path fast, void *data);
/// Marks a Swift frame as running (allocations past the memory limit
/// succeed, so no Lua error unwinds it); returns what to pass to
/// opsh_leave_host. For C code that calls Swift outside a trampoline.
int opsh_enter_host(lua_State *L);
void opsh_leave_host(lua_State *L, int outer);
/// The flag opsh_enter_host sets, for C code Lua calls once per row (the
/// `db.rows` iterator): looked up once, then set and restored in place of
/// opsh_enter_host and opsh_leave_host, which look up the state's record
/// on every call. It lives as long as the state.
int *opsh_host_flag(lua_State *L);
/// Raises the message on top of the stack, prefixed with the caller's
/// `chunk:line:` (as luaL_error does). For C code only: never call it from
/// a Swift frame.
int opsh_raise_where(lua_State *L);
/// Pushes a userdata that owns `context` (released when collected), with
/// the metatable registered under `type_name` (created empty when new;
/// returns 1 then, so the caller can fill it).
int opsh_push_host_object(lua_State *L, void *context, const char *type_name);
/// The context of a host object of `type_name` at `index`, or NULL.
void *opsh_to_host_object(lua_State *L, int index, const char *type_name);

// MARK: Calling Lua from Swift

/// lua_pcall with a message handler that appends a traceback; the memory
/// limit applies again while Lua runs, even when called from a Swift frame.
int opsh_pcall(lua_State *L, int nargs, int nresults);
/// Loads a chunk; mode "t" refuses precompiled chunks.
int opsh_load(lua_State *L, const char *code, size_t length, const char *chunkname, const char *mode);
/// True when `status`/message of a failed load means "the chunk is
/// incomplete" (the REPL then reads another line), as lua.c decides.
int opsh_is_incomplete(lua_State *L, int status);

// MARK: Interrupts

/// Asks the running chunk to stop, from any thread (or a signal handler).
/// Until opsh_clear_interrupt, every instruction raises again, so a
/// script's own pcall cannot swallow it.
void opsh_interrupt(lua_State *L, int reason);
/// The reason given to opsh_interrupt, or 0.
int opsh_interrupt_reason(lua_State *L);
/// The flag that stops SQL statements (an atomic_int), for checks outside
/// Lua: set by each interrupt, clear while a __close handler the first
/// interrupt lets run runs (its own statements run), set again by a second.
const void *opsh_interrupt_flag(lua_State *L);
void opsh_clear_interrupt(lua_State *L);
/// Lets the function at `index` start while an interrupt is pending (a
/// host object's __close: what it releases must not stay held when the
/// interrupt unwinds past it); the interrupt is raised as it returns.
void opsh_run_despite_interrupt(lua_State *L, int index);

// MARK: Macros as functions

int opsh_upvalueindex(int i);
int opsh_registryindex(void);
void opsh_pop(lua_State *L, int n);
void opsh_newtable(lua_State *L);
const char *opsh_tostring(lua_State *L, int index, size_t *length);
lua_Integer opsh_tointeger(lua_State *L, int index, int *isnum);
lua_Number opsh_tonumber(lua_State *L, int index, int *isnum);
void opsh_insert(lua_State *L, int index);
void opsh_remove(lua_State *L, int index);
void opsh_pushglobaltable(lua_State *L);
int opsh_ref(lua_State *L);
void opsh_unref(lua_State *L, int ref);
int opsh_getref(lua_State *L, int ref);
/// Opens the standard libraries; with `sandbox`, only those that cannot
/// reach the system (base, string, table, math, utf8, coroutine, and a
/// clock-only os).
void opsh_openlibs(lua_State *L, int sandbox);
/// `where` of a level as luaL_where gives it ("file:line:").
void opsh_where(lua_State *L, int level);

/// `equal(a, b)`: whether two values are equal as data — equal scalars,
/// or tables with the same keys and equal values at each, recursively
/// (metatables ignored). A value fetched again is a new table every time;
/// this is how a watch tells whether it changed.
int opsh_lua_data_equal(lua_State *L);

/// Flushes C's stdout (what Lua's `print` and `io.write` wrote) and says
/// whether any write to it failed: 0, the errno of the failure, or -1 when
/// an earlier write failed (its errno is gone). Lua itself ignores a failed flush after `print`.
int opsh_stdout_failure(void);

/// `value` in decimal, as printf's "%lld" writes it, into `text` of
/// `capacity` bytes (truncated and terminated as snprintf does); the
/// length the whole text has. The release build's `snprintf("%lld")`
/// (opsh_integer_text.c).
int opsh_integer_text(char *text, size_t capacity, long long value);
