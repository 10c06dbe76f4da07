/* testutil: the few helpers every test program shares. A failed CHECK
 * prints where and why and makes the program exit 1 at TEST_END. */
#ifndef LILAC_TESTUTIL_H
#define LILAC_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/env.h"

static int tu_failures;
static int tu_checks;

#define CHECK(cond) CHECKF(cond, "%s", #cond)
#define CHECKF(cond, ...)                                                    \
    do {                                                                     \
        tu_checks++;                                                         \
        if (!(cond)) {                                                       \
            tu_failures++;                                                   \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

/* Exit code 77 makes ctest report the test as skipped; the reason is printed. */
#define SKIP(...)                                                            \
    do {                                                                     \
        printf("SKIP: ");                                                    \
        printf(__VA_ARGS__);                                                 \
        printf("\n");                                                        \
        exit(77);                                                            \
    } while (0)

#define TEST_END()                                                           \
    do {                                                                     \
        printf("%d checks, %d failed\n", tu_checks, tu_failures);            \
        return tu_failures ? 1 : 0;                                          \
    } while (0)

/* The shared fixtures: $LILAC_FIXTURES, else ../shared/fixtures beside the
 * source tree. NULL when neither exists. */
static inline const char *tu_fixtures(void)
{
    static char buf[4096];
    const char *env = getenv("LILAC_FIXTURES");
    struct stat st;
    if (env && *env) {
        if (stat(env, &st) == 0 && S_ISDIR(st.st_mode))
            return env;
        return NULL;
    }
    snprintf(buf, sizeof buf, "%s/../shared/fixtures", LILAC_SOURCE_DIR);
    if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode))
        return buf;
    return NULL;
}

/* LILAC_TEST_MODELS=a,b (the GPU machine's runs, which carry one fixture model's files at a time): whether the
 * fixture model `name` is one of them; unset or empty: every model. A model left out is said, not passed over. */
static inline int tu_model_wanted(const char *name)
{
    const char *list = getenv("LILAC_TEST_MODELS");
    if (!list || !*list || lilac_env_list_has(list, name))
        return 1;
    printf("LILAC_TEST_MODELS=%s: %s left out\n", list, name);
    return 0;
}

/* The fixtures directory, or skip the test saying why. */
static inline const char *tu_require_fixtures(void)
{
    const char *d = tu_fixtures();
    if (!d)
        SKIP("fixtures not found (set LILAC_FIXTURES or place them at %s/../shared/fixtures)",
             LILAC_SOURCE_DIR);
    return d;
}

/* Read a whole file into a malloc'd buffer; NULL on failure. */
static inline void *tu_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf && size)
        *size = (size_t)n;
    return buf;
}

/* A file of exactly `want` float32 values, malloc'd; NULL (and a line on
 * stderr) when it is missing or of another size. */
static inline float *tu_read_f32(const char *path, size_t want)
{
    size_t size = 0;
    float *v = tu_read_file(path, &size);
    if (!v || size != want * sizeof(float)) {
        fprintf(stderr, "%s: missing or not %zu floats\n", path, want);
        free(v);
        return NULL;
    }
    return v;
}

/* Write a buffer to a file; 0 on success. */
static inline int tu_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, size, f);
    return (fclose(f) == 0 && w == size) ? 0 : -1;
}

#endif
