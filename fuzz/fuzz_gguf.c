/* libFuzzer target: the GGUF parser on arbitrary bytes, then every accessor
 * on whatever it accepted. Build and run with fuzz/run.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

/* Touch every byte a caller could touch, so ASan sees any pointer that
 * leads outside the input. */
static volatile uint8_t sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= b[i];
    sink = x;
}

static void walk_kv(const gguf_file *f, const gguf_kv *kv)
{
    lilac_error err;
    uint64_t u;
    double d;
    bool b;
    char *s = NULL;
    if (gguf_find_kv(f, kv->key) != kv)
        abort(); /* the index must find every key, and keys are unique */
    (void)gguf_get_u64(f, kv->key, &u, &err);
    (void)gguf_get_f64(f, kv->key, &d, &err);
    (void)gguf_get_bool(f, kv->key, &b, &err);
    if (gguf_get_str(f, kv->key, &s, &err) == LILAC_OK) {
        touch(s, strlen(s));
        free(s);
    }
    if (kv->type == GGUF_VT_STRING)
        touch(kv->v.s.ptr, (size_t)kv->v.s.len);
    if (kv->type != GGUF_VT_ARRAY)
        return;
    /* Bound the walk: arrays can hold a whole input's worth of elements. */
    uint64_t n = kv->v.arr.n < 4096 ? kv->v.arr.n : 4096;
    for (uint64_t i = 0; i <= n; i++) {
        int64_t v;
        (void)gguf_arr_u64(kv, i, &u);
        (void)gguf_arr_i64(kv, i, &v);
        (void)gguf_arr_f64(kv, i, &d);
        if (kv->v.arr.type == GGUF_VT_STRING && i < kv->v.arr.n)
            touch(kv->v.arr.strs[i].ptr, (size_t)kv->v.arr.strs[i].len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file *f = NULL;
    lilac_error err;
    if (gguf_parse(data, size, "fuzz.gguf", &f, &err) != LILAC_OK) {
        if (f || !strstr(err.msg, "fuzz.gguf"))
            abort(); /* failures leave out NULL and name the file */
        return 0;
    }
    (void)gguf_version(f);
    (void)gguf_alignment(f);
    (void)gguf_file_path(f, gguf_n_files(f));
    for (size_t i = 0; i < gguf_n_kv(f); i++)
        walk_kv(f, gguf_kv_at(f, i));
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (gguf_find_tensor(f, t->name) != t)
            abort();
        const uint8_t *p = t->data;
        if (p < data || p > data + size || t->nbytes > (size_t)(data + size - p))
            abort(); /* tensor data must lie inside the input */
        touch(p, t->nbytes < 64 ? t->nbytes : 64);
        if (t->nbytes)
            touch(p + t->nbytes - 1, 1);
    }
    (void)gguf_find_kv(f, "general.alignment");
    (void)gguf_find_tensor(f, "token_embd.weight");
    gguf_close(f);
    return 0;
}
