// The C row path (Sources/CSQLBridge/opsh_pg.c): a DataRow's body as the
// server sent it, turned into a Lua table without Swift in between. The
// fuzzer's input is the column count and kinds, then the body: whatever
// the lengths inside say, nothing is read outside the body
// (AddressSanitizer) and a malformed row is refused (0), never half-made.
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stddef.h>
#include <stdint.h>
#include "opsh_pg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lua_State *L;
    if (!L) L = luaL_newstate();
    if (size < 1) return 0;
    int columns = data[0] % 16;
    if (size < 1 + (size_t)columns) return 0;
    unsigned char kinds[16];
    for (int i = 0; i < columns; i++) kinds[i] = data[1 + i] % (OPSH_PG_TEXT_NUMERIC + 1);
    const unsigned char *body = data + 1 + columns;
    size_t length = size - 1 - columns;
    lua_settop(L, 0);
    lua_createtable(L, columns, 0);  // 1: the names
    for (int i = 0; i < columns; i++) {
        lua_pushfstring(L, "c%d", i);
        lua_rawseti(L, 1, i + 1);
    }
    lua_newtable(L);  // 2: the metatable
    opsh_pg_push_row(L, body, length, kinds, columns, 1, 2);
    lua_settop(L, 2);
    for (int i = 0; i < columns; i++) opsh_pg_push_column(L, body, length, kinds[i], i);
    lua_settop(L, 0);
    return 0;
}
