#include <sqlite3.h>
#include "opsh_returned_rows.h"
#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// MARK: Buffer

static int reserve(opsh_byte_buffer *buffer, size_t more) {
    if (buffer->count + more <= buffer->capacity) return 1;
    size_t capacity = buffer->capacity ? buffer->capacity : 4096;
    while (capacity < buffer->count + more) capacity *= 2;
    unsigned char *bytes = realloc(buffer->bytes, capacity);
    if (!bytes) return 0;
    buffer->bytes = bytes;
    buffer->capacity = capacity;
    return 1;
}

int opsh_byte_buffer_append(opsh_byte_buffer *buffer, const void *bytes, size_t length) {
    if (!reserve(buffer, length)) return 0;
    memcpy(buffer->bytes + buffer->count, bytes, length);
    buffer->count += length;
    return 1;
}

// MARK: Is the call the chunk's result?

// Lua 5.4's opcodes (lopcodes.h, 5.4.0 to 5.4.6) this test reads.
enum { OP_TBC = 55, OP_CALL = 68, OP_TAILCALL = 69, OP_TFORCALL = 76 };

static int collect_dump(lua_State *L, const void *bytes, size_t length, void *buffer) {
    (void)L;
    return opsh_byte_buffer_append(buffer, bytes, length) ? 0 : 1;
}

/// A size as lundump.c reads it: 7 bits a byte, the last byte marked.
static int read_size(const unsigned char *bytes, size_t count, size_t *at, size_t *value) {
    size_t result = 0;
    for (int limit = 0; limit < 10 && *at < count; limit++) {
        unsigned char byte = bytes[(*at)++];
        result = (result << 7) | (byte & 0x7F);
        if (byte & 0x80) {
            *value = result;
            return 1;
        }
    }
    return 0;
}

/// The register of the only call instruction of the function on top of
/// the stack when that call is a tail call; -1 otherwise. Reads the code
/// of the function's stripped dump (ldump.c: the header, the upvalue
/// count, then source, line defined, last line, 3 bytes, the code).
static int tail_register(lua_State *L) {
    opsh_byte_buffer dump = {0};
    int result = -1;
    if (lua_dump(L, collect_dump, &dump, 1) != 0) goto done;
    static const unsigned char signature[] = {0x1B, 'L', 'u', 'a', 0x54, 0};
    const size_t header = 4 + 1 + 1 + 6 + 3 + sizeof(lua_Integer) + sizeof(lua_Number) + 1;
    if (dump.count < header || memcmp(dump.bytes, signature, sizeof signature) != 0 || dump.bytes[12] != 4) goto done;
    size_t at = header, source, ignored, size;
    if (!read_size(dump.bytes, dump.count, &at, &source) || source != 0) goto done;
    if (!read_size(dump.bytes, dump.count, &at, &ignored) || !read_size(dump.bytes, dump.count, &at, &ignored)) goto done;
    at += 3;
    if (!read_size(dump.bytes, dump.count, &at, &size) || at + size * 4 > dump.count) goto done;
    int calls = 0, tail = -1;
    for (size_t index = 0; index < size; index++) {
        uint32_t instruction;
        memcpy(&instruction, dump.bytes + at + index * 4, 4);
        unsigned opcode = instruction & 0x7F;
        if (opcode == OP_CALL || opcode == OP_TFORCALL || opcode == OP_TBC) calls += 2;
        if (opcode == OP_TAILCALL) {
            calls++;
            tail = (int)((instruction >> 7) & 0xFF);
        }
    }
    if (calls == 1) result = tail;
done:
    free(dump.bytes);
    return result;
}

int opsh_is_chunk_result(lua_State *L, opsh_chunk_result_cache *cache) {
    int main_thread = lua_pushthread(L);
    lua_pop(L, 1);
    lua_Debug caller, below;
    // The caller is the outermost frame: the chunk, or what it tail-called.
    if (!main_thread || !lua_getstack(L, 1, &caller) || lua_getstack(L, 2, &below)) return 0;
    if (!lua_getinfo(L, "Sf", &caller)) return 0;
    if (strcmp(caller.what, "main") != 0 && strcmp(caller.what, "Lua") != 0) {
        lua_pop(L, 1);
        return 0;
    }
    const void *function = lua_topointer(L, -1);
    if (cache->function != function) {
        cache->tail_register = tail_register(L);
        if (cache->reference > 0) luaL_unref(L, LUA_REGISTRYINDEX, cache->reference);
        lua_pushvalue(L, -1);
        cache->reference = luaL_ref(L, LUA_REGISTRYINDEX);
        cache->function = function;
    }
    lua_pop(L, 1);
    int tail = cache->tail_register;
    if (tail < 0) return 0;
    // This call's function sits in the caller's register `tail`: the
    // caller's frame reaches exactly that far (lua_getlocal names every
    // slot below the callee's function).
    if (tail > 0) {
        if (!lua_getlocal(L, &caller, tail)) return 0;
        lua_pop(L, 1);
    }
    if (lua_getlocal(L, &caller, tail + 1)) {
        lua_pop(L, 1);
        return 0;
    }
    return 1;
}

// MARK: Writing

static int flush(opsh_rows_writer *writer, opsh_byte_buffer *out) {
    size_t offset = 0;
    while (offset < out->count) {
        ssize_t written = write(writer->descriptor, out->bytes + offset, out->count - offset);
        if (written < 0) {
            if (errno == EINTR) continue;
            writer->write_error = errno;
            return 0;
        }
        offset += (size_t)written;
    }
    out->count = 0;
    return 1;
}

/// Printable ASCII, tab and newline only: written as it is (quoted or
/// escaped); anything else is the printer's (control pictures, UTF-8).
static int is_plain(const unsigned char *bytes, size_t length) {
    for (size_t index = 0; index < length; index++) {
        unsigned char byte = bytes[index];
        if ((byte < 0x20 && byte != '\t' && byte != '\n') || byte >= 0x7F) return 0;
    }
    return 1;
}

/// DelimitedText's rules for plain text: CSV quotes a field holding `,`,
/// `"` or a newline and doubles `"`; TSV escapes tab, newline and `\`.
static int append_plain(opsh_byte_buffer *out, const unsigned char *bytes, size_t length, int tsv) {
    if (!reserve(out, length * 2 + 2)) return 0;
    unsigned char *to = out->bytes + out->count;
    if (!tsv) {
        int quoted = 0;
        for (size_t index = 0; index < length && !quoted; index++)
            quoted = bytes[index] == ',' || bytes[index] == '"' || bytes[index] == '\n';
        if (!quoted) {
            memcpy(to, bytes, length);
            out->count += length;
            return 1;
        }
        *to++ = '"';
        for (size_t index = 0; index < length; index++) {
            if (bytes[index] == '"') *to++ = '"';
            *to++ = bytes[index];
        }
        *to++ = '"';
    } else {
        for (size_t index = 0; index < length; index++) {
            unsigned char byte = bytes[index];
            if (byte == '\t') { *to++ = '\\'; *to++ = 't'; }
            else if (byte == '\n') { *to++ = '\\'; *to++ = 'n'; }
            else if (byte == '\\') { *to++ = '\\'; *to++ = '\\'; }
            else *to++ = byte;
        }
    }
    out->count = (size_t)(to - out->bytes);
    return 1;
}

/// A float as Lua's tostring writes it (lobject.c, tostringbuff): "%.14g",
/// and ".0" after what looks like an integer.
static int append_float(opsh_byte_buffer *out, double value) {
    char text[64];
    int length = snprintf(text, sizeof text - 2, "%.14g", value);
    if (length < 0) return 0;
    if (text[strspn(text, "-0123456789")] == '\0') {
        text[length++] = localeconv()->decimal_point[0];
        text[length++] = '0';
    }
    return opsh_byte_buffer_append(out, text, (size_t)length);
}

static int append_integer(opsh_byte_buffer *out, sqlite3_int64 value) {
    char text[32];
    int length = snprintf(text, sizeof text, "%lld", (long long)value);
    return opsh_byte_buffer_append(out, text, (size_t)length);
}

int opsh_write_returned_rows(sqlite3_stmt *statement, const unsigned char *header, size_t header_length,
                             opsh_rows_writer *writer) {
    opsh_byte_buffer out = {0};
    const size_t block = 1 << 16;
    int columns = sqlite3_column_count(statement);
    unsigned char separator = writer->tsv ? '\t' : ',';
    int code = -1;
    writer->rows = 0;
    writer->write_error = 0;
    if (!reserve(&out, block * 2) || !opsh_byte_buffer_append(&out, header, header_length)
        || !opsh_byte_buffer_append(&out, "\n", 1))
        goto done;
    while ((code = sqlite3_step(statement)) == SQLITE_ROW) {
        for (int column = 0; column < columns; column++) {
            if (column > 0 && !opsh_byte_buffer_append(&out, &separator, 1)) goto failed;
            int ok = 1;
            switch (sqlite3_column_type(statement, column)) {
            case SQLITE_NULL:
                break;
            case SQLITE_INTEGER:
                ok = append_integer(&out, sqlite3_column_int64(statement, column));
                break;
            case SQLITE_FLOAT:
                ok = append_float(&out, sqlite3_column_double(statement, column));
                break;
            default: {
                // Text and BLOBs alike: a Lua string of their bytes.
                const unsigned char *bytes = sqlite3_column_type(statement, column) == SQLITE_TEXT
                    ? sqlite3_column_text(statement, column) : sqlite3_column_blob(statement, column);
                size_t length = (size_t)sqlite3_column_bytes(statement, column);
                if (!bytes) bytes = (const unsigned char *)"";
                if (!writer->delegated[column] && is_plain(bytes, length)) ok = append_plain(&out, bytes, length, writer->tsv);
                else ok = writer->other(writer->context, bytes, length, column, &out);
            }
            }
            if (!ok) goto failed;
        }
        if (!opsh_byte_buffer_append(&out, "\n", 1)) goto failed;
        writer->rows++;
        if (out.count >= block && !flush(writer, &out)) goto failed;
        if (writer->progress && writer->rows % 1024 == 0) writer->progress(writer->context, writer->rows);
    }
    if (!flush(writer, &out)) goto failed;
    goto done;
failed:
    code = -1;
done:
    free(out.bytes);
    return code;
}

// MARK: The value of a streamed query

static const char rows_written_marker = 0;

void opsh_push_rows_written(lua_State *L) { lua_pushlightuserdata(L, (void *)&rows_written_marker); }

int opsh_is_rows_written(lua_State *L, int index) {
    return lua_type(L, index) == LUA_TLIGHTUSERDATA && lua_touserdata(L, index) == &rows_written_marker;
}
