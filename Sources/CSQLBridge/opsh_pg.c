#define _GNU_SOURCE
#include "opsh_pg.h"
#include "opsh_rows_built.h"
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// MARK: Reading the wire's bytes

static uint16_t read16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t read32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static uint64_t read64(const unsigned char *p) { return ((uint64_t)read32(p) << 32) | read32(p + 4); }

// MARK: Text

/// The length of the well-formed UTF-8 sequence at `bytes` (1 to 4), or 0
/// if it is not one; `*valid` is set to the length of its maximal valid
/// prefix (Unicode's "maximal subpart", at least 1), which Swift's
/// String(decoding:as:) replaces with one U+FFFD.
static size_t utf8_sequence(const unsigned char *bytes, size_t left, size_t *subpart) {
    unsigned char lead = bytes[0];
    size_t width;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's range
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) width = 2;
    else if (lead == 0xE0) { width = 3; low = 0xA0; }
    else if (lead == 0xED) { width = 3; high = 0x9F; }
    else if (lead >= 0xE1 && lead <= 0xEF) width = 3;
    else if (lead == 0xF0) { width = 4; low = 0x90; }
    else if (lead >= 0xF1 && lead <= 0xF3) width = 4;
    else if (lead == 0xF4) { width = 4; high = 0x8F; }
    else { *subpart = 1; return 0; }
    size_t index = 1;
    for (; index < width; index++) {
        if (index >= left) break;
        unsigned char byte = bytes[index];
        if (index == 1 ? (byte < low || byte > high) : (byte < 0x80 || byte > 0xBF)) break;
    }
    if (index == width) return width;
    *subpart = index;
    return 0;
}

/// Pushes text as Swift's String(decoding:as: UTF8.self) would read it:
/// the bytes themselves when they are UTF-8 (PostgreSQL's text always is
/// with client_encoding UTF8, short of an SQL_ASCII database), else with
/// each ill-formed part replaced by U+FFFD.
static void push_text(lua_State *L, const unsigned char *bytes, size_t length) {
    size_t index = 0;
    while (index < length && bytes[index] < 0x80) index++;
    size_t subpart = 0;
    while (index < length) {
        size_t width = utf8_sequence(bytes + index, length - index, &subpart);
        if (width == 0) break;
        index += width;
    }
    if (index == length) {
        lua_pushlstring(L, (const char *)bytes, length);
        return;
    }
    luaL_Buffer buffer;
    luaL_buffinitsize(L, &buffer, length + 8);
    luaL_addlstring(&buffer, (const char *)bytes, index);
    while (index < length) {
        size_t width = utf8_sequence(bytes + index, length - index, &subpart);
        if (width) {
            luaL_addlstring(&buffer, (const char *)bytes + index, width);
            index += width;
        } else {
            luaL_addlstring(&buffer, "\xEF\xBF\xBD", 3);
            index += subpart;
        }
    }
    luaL_pushresult(&buffer);
}

// MARK: Numbers in text, as Swift's Int64(_:), Double(_:), Float(_:) read them

/// Int64(text): an optional sign, then decimal digits only, within 64 bits.
static int parse_int64(const unsigned char *bytes, size_t length, int64_t *out) {
    size_t index = 0;
    int negative = 0;
    if (length > 0 && (bytes[0] == '-' || bytes[0] == '+')) {
        negative = bytes[0] == '-';
        index = 1;
    }
    if (index == length) return 0;
    uint64_t value = 0;
    const uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; index < length; index++) {
        unsigned char c = bytes[index];
        if (c < '0' || c > '9') return 0;
        uint64_t digit = c - '0';
        if (value > (limit - digit) / 10) return 0;
        value = value * 10 + digit;
    }
    *out = negative ? (int64_t)(0 - value) : (int64_t)value;
    return 1;
}

static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static locale_t c_locale;
static void make_c_locale(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/// Double(text) / Float(text): strtod in the C locale, refusing an empty
/// text, leading white space and anything left unread (out of range is
/// infinity or zero, not a failure).
static int parse_float(const unsigned char *bytes, size_t length, int single, double *out) {
    if (length == 0) return 0;
    switch (bytes[0]) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r': return 0;
    default: break;
    }
    // Swift reads "snan" and "-snan", in any case, as a (signaling) NaN;
    // strtod does not.
    size_t sign = bytes[0] == '-' ? 1 : 0;
    if (length - sign == 4 && strncasecmp((const char *)bytes + sign, "snan", 4) == 0) {
        *out = NAN;
        return 1;
    }
    pthread_once(&c_locale_once, make_c_locale);
    // A copy with its NUL (numeric's text can be 131,072 digits long).
    char small[128];
    char *text = length < sizeof small ? small : malloc(length + 1);
    if (!text) return 0;
    memcpy(text, bytes, length);
    text[length] = 0;
    char *end = NULL;
    int ok;
    if (single) {
        float value = strtof_l(text, &end, c_locale);
        *out = (double)value;
    } else {
        *out = strtod_l(text, &end, c_locale);
    }
    ok = end == text + length;
    if (text != small) free(text);
    return ok;
}

// MARK: Values

static int hex_nibble(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/// bytea's text form (`\x` and hex) as its bytes; 0 if it is not that.
static int push_bytea_hex(lua_State *L, const unsigned char *bytes, size_t length) {
    if (length < 2 || bytes[0] != '\\' || bytes[1] != 'x' || length % 2 != 0) return 0;
    for (size_t index = 2; index < length; index++) if (hex_nibble(bytes[index]) < 0) return 0;
    luaL_Buffer buffer;
    char *out = luaL_buffinitsize(L, &buffer, (length - 2) / 2);
    for (size_t index = 2, at = 0; index < length; index += 2, at++)
        out[at] = (char)(hex_nibble(bytes[index]) << 4 | hex_nibble(bytes[index + 1]));
    luaL_pushresultsize(&buffer, (length - 2) / 2);
    return 1;
}

void opsh_pg_push_value(lua_State *L, const unsigned char *bytes, size_t length, unsigned char kind) {
    switch (kind) {
    // Binary: PostgresWire checked the sizes.
    case OPSH_PG_BINARY_INT2:
        if (length == 2) { lua_pushinteger(L, (int16_t)read16(bytes)); return; }
        break;
    case OPSH_PG_BINARY_INT4:
        if (length == 4) { lua_pushinteger(L, (int32_t)read32(bytes)); return; }
        break;
    case OPSH_PG_BINARY_OID:
        if (length == 4) { lua_pushinteger(L, (lua_Integer)read32(bytes)); return; }
        break;
    case OPSH_PG_BINARY_INT8:
        if (length == 8) { lua_pushinteger(L, (lua_Integer)read64(bytes)); return; }
        break;
    case OPSH_PG_BINARY_FLOAT4:
        if (length == 4) {
            uint32_t bits = read32(bytes);
            float value;
            memcpy(&value, &bits, sizeof value);
            lua_pushnumber(L, (double)value);
            return;
        }
        break;
    case OPSH_PG_BINARY_FLOAT8:
        if (length == 8) {
            uint64_t bits = read64(bytes);
            double value;
            memcpy(&value, &bits, sizeof value);
            lua_pushnumber(L, value);
            return;
        }
        break;
    case OPSH_PG_BINARY_BOOL:
        if (length == 1) { lua_pushinteger(L, bytes[0] != 0 ? 1 : 0); return; }
        break;
    case OPSH_PG_BINARY_BYTEA:
        lua_pushlstring(L, (const char *)bytes, length);
        return;
    // Text.
    case OPSH_PG_TEXT_INTEGER: {
        int64_t value;
        if (parse_int64(bytes, length, &value)) { lua_pushinteger(L, value); return; }
        break;
    }
    case OPSH_PG_TEXT_FLOAT4:
    case OPSH_PG_TEXT_FLOAT8: {
        if (length == 3 && memcmp(bytes, "NaN", 3) == 0) { lua_pushnumber(L, NAN); return; }
        if (length == 8 && memcmp(bytes, "Infinity", 8) == 0) { lua_pushnumber(L, INFINITY); return; }
        if (length == 9 && memcmp(bytes, "-Infinity", 9) == 0) { lua_pushnumber(L, -INFINITY); return; }
        double value;
        if (kind == OPSH_PG_TEXT_FLOAT4 && parse_float(bytes, length, 1, &value)) { lua_pushnumber(L, value); return; }
        if (parse_float(bytes, length, 0, &value)) { lua_pushnumber(L, value); return; }
        break;
    }
    case OPSH_PG_TEXT_BOOL:
        lua_pushinteger(L, length == 1 && bytes[0] == 't' ? 1 : 0);
        return;
    case OPSH_PG_TEXT_BYTEA:
        if (push_bytea_hex(L, bytes, length)) return;
        break;
    case OPSH_PG_TEXT_NUMERIC: {
        int64_t integer;
        if (parse_int64(bytes, length, &integer)) { lua_pushinteger(L, integer); return; }
        double value;
        if (parse_float(bytes, length, 0, &value) && isfinite(value)) { lua_pushnumber(L, value); return; }
        break;
    }
    default:
        break;
    }
    push_text(L, bytes, length);
}

int opsh_pg_push_row(lua_State *L, const unsigned char *body, size_t length,
                     const unsigned char *kinds, int column_count, int names, int metatable) {
    if (length < 2 || read16(body) != column_count) return 0;
    opsh_count_row();
    lua_createtable(L, 0, column_count);
    size_t at = 2;
    for (int column = 0; column < column_count; column++) {
        if (length - at < 4) { lua_pop(L, 1); return 0; }
        int32_t size = (int32_t)read32(body + at);
        at += 4;
        if (size < 0) continue;
        if ((size_t)size > length - at) { lua_pop(L, 1); return 0; }
        lua_rawgeti(L, names, column + 1);
        opsh_pg_push_value(L, body + at, (size_t)size, kinds[column]);
        lua_rawset(L, -3);
        at += (size_t)size;
    }
    lua_pushvalue(L, metatable);
    lua_setmetatable(L, -2);
    return 1;
}

int opsh_pg_push_column(lua_State *L, const unsigned char *body, size_t length, unsigned char kind, int column) {
    if (length < 2 || column < 0 || column >= read16(body)) return 0;
    size_t at = 2;
    for (int index = 0;; index++) {
        if (length - at < 4) return 0;
        int32_t size = (int32_t)read32(body + at);
        at += 4;
        if (size >= 0 && (size_t)size > length - at) return 0;
        if (index == column) {
            if (size < 0) lua_pushnil(L);
            else opsh_pg_push_value(L, body + at, (size_t)size, kind);
            return 1;
        }
        if (size > 0) at += (size_t)size;
    }
}

// MARK: Row stores

struct opsh_pg_rows {
    lua_Alloc alloc;
    void *alloc_data;
    /// Each row: its body's length (a size_t, unaligned) and the body.
    unsigned char *bytes;
    size_t used, capacity;
    size_t count;
    /// Where the iterator reads next, and how many rows it returned.
    size_t position, returned;
    unsigned char *kinds;
    int column_count;
};

#define ROWS_METATABLE "opsh.pgrows"

static void rows_free_bytes(opsh_pg_rows *rows) {
    if (rows->bytes) rows->alloc(rows->alloc_data, rows->bytes, rows->capacity, 0);
    rows->bytes = NULL;
    rows->used = rows->capacity = 0;
}

static int rows_gc(lua_State *L) {
    opsh_pg_rows *rows = (opsh_pg_rows *)luaL_checkudata(L, 1, ROWS_METATABLE);
    rows_free_bytes(rows);
    if (rows->kinds) rows->alloc(rows->alloc_data, rows->kinds, (size_t)rows->column_count, 0);
    rows->kinds = NULL;
    return 0;
}

opsh_pg_rows *opsh_pg_rows_new(lua_State *L) {
    opsh_pg_rows *rows = (opsh_pg_rows *)lua_newuserdatauv(L, sizeof *rows, 0);
    memset(rows, 0, sizeof *rows);
    rows->alloc = lua_getallocf(L, &rows->alloc_data);
    if (luaL_newmetatable(L, ROWS_METATABLE)) {
        lua_pushcfunction(L, rows_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return rows;
}

int opsh_pg_rows_append(opsh_pg_rows *rows, const void *body, size_t length) {
    size_t needed = sizeof(size_t) + length;
    if (rows->capacity - rows->used < needed) {
        size_t capacity = rows->capacity ? rows->capacity : 64 * 1024;
        while (capacity - rows->used < needed) capacity *= 2;
        unsigned char *grown = rows->alloc(rows->alloc_data, rows->bytes, rows->capacity, capacity);
        if (!grown) return 0;
        rows->bytes = grown;
        rows->capacity = capacity;
    }
    memcpy(rows->bytes + rows->used, &length, sizeof length);
    memcpy(rows->bytes + rows->used + sizeof length, body, length);
    rows->used += needed;
    rows->count++;
    return 1;
}

size_t opsh_pg_rows_count(const opsh_pg_rows *rows) { return rows->count; }

int opsh_pg_rows_set_kinds(opsh_pg_rows *rows, const unsigned char *kinds, int column_count) {
    if (rows->kinds) rows->alloc(rows->alloc_data, rows->kinds, (size_t)rows->column_count, 0);
    rows->kinds = NULL;
    rows->column_count = 0;
    if (column_count > 0) {
        rows->kinds = rows->alloc(rows->alloc_data, NULL, 0, (size_t)column_count);
        if (!rows->kinds) return 0;
        memcpy(rows->kinds, kinds, (size_t)column_count);
    }
    rows->column_count = column_count;
    return 1;
}

/// Pushes the row at `rows->position` and moves past it; 0 at the end or
/// on a malformed row (nothing pushed).
static int rows_push_next(lua_State *L, opsh_pg_rows *rows, int names, int metatable) {
    if (rows->position >= rows->used) return 0;
    size_t length;
    memcpy(&length, rows->bytes + rows->position, sizeof length);
    const unsigned char *body = rows->bytes + rows->position + sizeof length;
    if (!opsh_pg_push_row(L, body, length, rows->kinds, rows->column_count, names, metatable)) return 0;
    rows->position += sizeof length + length;
    rows->returned++;
    return 1;
}

// Upvalues: 1 the row store, 2 the names, 3 the row metatable.
static int rows_next(lua_State *L) {
    opsh_pg_rows *rows = (opsh_pg_rows *)lua_touserdata(L, lua_upvalueindex(1));
    if (rows->returned < rows->count) {
        if (rows_push_next(L, rows, lua_upvalueindex(2), lua_upvalueindex(3))) return 1;
        // PostgresWire checked every row: this does not happen.
        return luaL_error(L, "db.rows: row %d is malformed", (int)rows->returned + 1);
    }
    // The end: the bytes go now rather than when the loop's closure is
    // collected.
    rows->returned = rows->count;
    rows_free_bytes(rows);
    lua_pushnil(L);
    return 1;
}

void opsh_pg_push_rows_iterator(lua_State *L, int store, int names, int metatable) {
    opsh_pg_rows *rows = (opsh_pg_rows *)lua_touserdata(L, store);
    rows->position = 0;
    rows->returned = 0;
    lua_pushvalue(L, store);
    lua_pushvalue(L, names);
    lua_pushvalue(L, metatable);
    lua_pushcclosure(L, rows_next, 3);
}
