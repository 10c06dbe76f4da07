/* Load maps the file: opening a model reads its metadata and the few small
 * tensors converted at load (norms, conv, decay), never the weights, so
 * resident memory grows by far less than the file's size. */
#include <time.h>
#include <unistd.h>

#include "models.h"

static long resident_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void check(const char *path, long file_kib, long bound_kib)
{
    long before = resident_kib();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    lilac_model *m = tm_open(path, 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long after = resident_kib();
    CHECKF(m != NULL, "%s loads", path);
    if (!m)
        return;
    long grew = after - before;
    printf("%s: file %ld KiB, resident grew by %ld KiB at load (%.1f ms)\n", path, file_kib, grew,
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    CHECKF(grew < bound_kib, "%s: resident memory grew by %ld KiB at load (bound %ld KiB of a %ld KiB file)", path,
           grew, bound_kib, file_kib);
    lilac_model_free(m);
}

int main(void)
{
    if (resident_kib() < 0)
        SKIP("/proc/self/statm is not readable here");
    const char *fx = tu_require_fixtures();
    char path[8192];
    /* Bound: metadata (a 2048-token vocabulary), small tensors as float32,
     * the allocator's own, and under ASan its shadow memory: 4 MiB of a
     * 20 MiB file. Reading the weights would add all 20. */
    if (snprintf(path, sizeof path, "%s/tiny-qwen35moe/gguf/model-bf16.gguf", fx) >= (int)sizeof path)
        SKIP("fixtures path too long");
    check(path, 20141, 4096);
    if (snprintf(path, sizeof path, "%s/tiny-qwen35moe/hf", fx) >= (int)sizeof path)
        SKIP("fixtures path too long");
    check(path, 20045, 4096);
    TEST_END();
}
