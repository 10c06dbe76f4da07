/* gguf_compare: comparing GGUF metadata values in tests (a file written by
 * lilac against one written by llama.cpp's tools). */
#ifndef LILAC_TEST_GGUF_COMPARE_H
#define LILAC_TEST_GGUF_COMPARE_H

#include <stdio.h>
#include <string.h>

#include "format/gguf.h"

/* why (may be NULL) gets what differs */
#define GC_WHY(...)                                                                                         \
    do {                                                                                                    \
        if (why)                                                                                            \
            snprintf(why, wn, __VA_ARGS__);                                                                 \
    } while (0)

static inline bool gc_kv_equal(const gguf_kv *a, const gguf_kv *b, char *why, size_t wn)
{
    if (a->type != b->type) {
        GC_WHY( "type %d vs %d", a->type, b->type);
        return false;
    }
    switch (a->type) {
    case GGUF_VT_STRING:
        if (a->v.s.len != b->v.s.len || memcmp(a->v.s.ptr, b->v.s.ptr, a->v.s.len)) {
            GC_WHY( "'%.*s' vs '%.*s'", (int)(a->v.s.len < 60 ? a->v.s.len : 60), a->v.s.ptr,
                     (int)(b->v.s.len < 60 ? b->v.s.len : 60), b->v.s.ptr);
            return false;
        }
        return true;
    case GGUF_VT_ARRAY:
        if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n) {
            GC_WHY( "array of %llu x type %d vs %llu x type %d", (unsigned long long)a->v.arr.n,
                     a->v.arr.type, (unsigned long long)b->v.arr.n, b->v.arr.type);
            return false;
        }
        for (uint64_t i = 0; i < a->v.arr.n; i++) {
            if (a->v.arr.type == GGUF_VT_STRING) {
                const gguf_str *x = &a->v.arr.strs[i], *y = &b->v.arr.strs[i];
                if (x->len != y->len || memcmp(x->ptr, y->ptr, x->len)) {
                    GC_WHY( "element %llu: '%.*s' vs '%.*s'", (unsigned long long)i,
                             (int)(x->len < 60 ? x->len : 60), x->ptr, (int)(y->len < 60 ? y->len : 60), y->ptr);
                    return false;
                }
            } else {
                double x = 0, y = 0;
                gguf_arr_f64(a, i, &x);
                gguf_arr_f64(b, i, &y);
                if (x != y) {
                    GC_WHY( "element %llu: %g vs %g", (unsigned long long)i, x, y);
                    return false;
                }
            }
        }
        return true;
    case GGUF_VT_F32:
    case GGUF_VT_F64:
        if (a->v.f != b->v.f) {
            GC_WHY( "%.9g vs %.9g", a->v.f, b->v.f);
            return false;
        }
        return true;
    default:
        if (a->v.u != b->v.u) {
            GC_WHY( "%llu vs %llu", (unsigned long long)a->v.u, (unsigned long long)b->v.u);
            return false;
        }
        return true;
    }
}

#endif
