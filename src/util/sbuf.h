/* sbuf: a growing, NUL-terminated output buffer. A failed allocation sets
 * oom and makes later appends do nothing, so a writer checks once at the
 * end. The caller owns p (free it). */
#ifndef LILAC_UTIL_SBUF_H
#define LILAC_UTIL_SBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

void sb_putn(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);

#endif
