// Lua 5.4's table as its lobject.h lays it out (the same from 5.4.0 to
// 5.4.7), for db.rows's iterator alone: it makes a row as a copy of its
// loop's template row (opsh_sql.c, "A row as a copy"). Lua does not install
// lobject.h; the template is checked against this layout as each loop
// begins (rows_template_check), and a loop whose template does not match
// makes its rows field by field through the public API, as before.
#ifndef OPSH_LUA_TABLE_H
#define OPSH_LUA_TABLE_H

#include "opsh_lua.h"

#if LUA_VERSION_NUM == 504
#define OPSH_LUA_TABLE_LAYOUT 1

typedef union {
    void *gc;
    lua_Integer i;
    lua_Number n;
} opsh_lua_value;

typedef union {
    struct {
        opsh_lua_value value;
        unsigned char value_tag;
        unsigned char key_tag;
        int next;
        opsh_lua_value key;
    } u;
} opsh_lua_node;

typedef struct opsh_lua_table {
    void *next;
    unsigned char tag, marked;
    // Bit p set: metamethod p is known absent (a cache Lua keeps when the
    // table serves as a metatable).
    unsigned char flags;
    unsigned char log_node_count;
    unsigned int array_limit;
    void *array;
    opsh_lua_node *node;
    opsh_lua_node *last_free;
    struct opsh_lua_table *metatable;
    void *gray_list;
} opsh_lua_table;

// Value tags (lobject.h: the type, a variant in bits 4-5, collectable in bit 6).
#define OPSH_LUA_TAG_INTEGER 3     // LUA_VNUMINT
#define OPSH_LUA_TAG_FLOAT 19      // LUA_VNUMFLT
#define OPSH_LUA_TAG_TRUE 17       // LUA_VTRUE
#define OPSH_LUA_TAG_SHORT_KEY 68  // a short string, collectable
#define OPSH_LUA_TAG_LONG_KEY 84   // a long string, collectable
// ltm.h's TM_GC: its bit in `flags`.
#define OPSH_LUA_FLAG_NO_GC (1u << 2)
#endif

#endif
