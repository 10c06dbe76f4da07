/* fuzz_safetensors: libFuzzer target for the safetensors header parser.
 * Parses the input as a whole file image, then touches every tensor's bytes
 * so that ASan catches any data pointer or size that escapes the image. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy of exactly size bytes: libFuzzer's buffer is exact
     * already, but this also gives a non-NULL base for size 0. */
    uint8_t *img = malloc(size ? size : 1);
    if (!img)
        return 0;
    if (size)
        memcpy(img, data, size);

    st_set *s = NULL;
    lilac_error err;
    if (st_parse(img, size, "fuzz.safetensors", &s, &err) != LILAC_OK) {
        if (s || !memchr(err.msg, '\0', sizeof err.msg))
            abort(); /* failure must leave no set and a terminated message */
        free(img);
        return 0;
    }

    volatile uint8_t sink = 0;
    size_t n = st_n_tensors(s);
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_tensor_at(s, i);
        const lilac_dtype_info *di = lilac_dtype_get(t->dtype);
        if (!t->name[0] || t->n_dims < 0 || t->n_dims > ST_MAX_DIMS || !di)
            abort();
        uint64_t elems = 1;
        for (int d = 0; d < t->n_dims; d++) {
            if (t->shape[d] < 0)
                abort();
            elems *= (uint64_t)t->shape[d];
        }
        if (elems * di->size != t->nbytes)
            abort();
        const uint8_t *p = t->data;
        if (p < img || p + t->nbytes > img + size)
            abort();
        if (t->nbytes) {
            sink ^= p[0];
            sink ^= p[t->nbytes - 1];
        }
        if (st_find(s, t->name) != t)
            abort(); /* names are unique and lookup finds each */
        if (i > 0 && strcmp(st_tensor_at(s, i - 1)->name, t->name) >= 0)
            abort();
    }
    if (n && st_find(s, "") != NULL)
        abort();
    (void)st_find(s, "model.embed_tokens.weight");
    (void)st_find(s, "__metadata__");
    (void)st_metadata(s, 0, "format");
    (void)st_file_path(s, 0);
    (void)sink;
    st_close(s);
    free(img);
    return 0;
}
