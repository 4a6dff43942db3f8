// Lua's integers as text (`"name" .. i`, `tostring(i)`), without printf.
//
// Lua 5.4 writes an integer as text with `snprintf(buffer, 44, "%lld", n)`
// (lobject.c, tostringbuff); Debian's liblua5.4 is built fortified, so the
// call is `__snprintf_chk`. glibc's printf machinery took about 550
// instructions and a third of the instruction-cache misses of a row of
// bench/sql-workload's insert loop (ARCHITECTURE.md, "Measured facts").
// The release build links with `--wrap=__snprintf_chk`
// (scripts/build-release): every call of it in the static executable comes
// here; the format "%lld" is written below, every other format goes on to
// glibc's own, unchanged. A dynamically linked build (swift build) never
// calls this function.
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include "opsh_lua.h"

int __vsnprintf_chk(char *text, size_t capacity, int flag, size_t size, const char *format, va_list arguments);
int __wrap___snprintf_chk(char *text, size_t capacity, int flag, size_t size, const char *format, ...);

int opsh_integer_text(char *text, size_t capacity, long long value) {
    char digits[24];
    char *end = digits + sizeof digits, *start = end;
    // In unsigned arithmetic, so that LLONG_MIN has its digits too.
    unsigned long long magnitude = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        *--start = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (value < 0) *--start = '-';
    size_t length = (size_t)(end - start);
    if (capacity > 0) {
        size_t copied = length < capacity ? length : capacity - 1;
        memcpy(text, start, copied);
        text[copied] = '\0';
    }
    return (int)length;
}

int __wrap___snprintf_chk(char *text, size_t capacity, int flag, size_t size, const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    int length;
    // The fortified checks stay glibc's: a capacity larger than the
    // buffer (which it refuses) goes to it, as does every other format.
    if (size >= capacity && format[0] == '%' && format[1] == 'l' && format[2] == 'l' && format[3] == 'd'
        && format[4] == '\0') {
        length = opsh_integer_text(text, capacity, va_arg(arguments, long long));
    } else {
        length = __vsnprintf_chk(text, capacity, flag, size, format, arguments);
    }
    va_end(arguments);
    return length;
}
