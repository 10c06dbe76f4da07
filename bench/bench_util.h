/* bench_util: what the benchmark programs share: a monotonic clock, a
 * seeded xorshift generator, and the clock rate /proc/cpuinfo reports. */
#ifndef LILAC_BENCH_UTIL_H
#define LILAC_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static inline double bu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t bu_rng = 0x2545f4914f6cdd1dull;

static inline uint64_t bu_next(void)
{
    bu_rng ^= bu_rng << 13, bu_rng ^= bu_rng >> 7, bu_rng ^= bu_rng << 17;
    return bu_rng;
}

/* uniform in [-1, 1) */
static inline float bu_frand(void)
{
    return (float)((bu_next() >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* MHz from /proc/cpuinfo (2600 when it says nothing): below the boost
 * clock on most machines, so fractions of peak read high */
static inline double bu_cpu_mhz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    double mhz = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "cpu MHz", 7) && sscanf(strchr(line, ':') + 1, "%lf", &mhz) == 1)
            break;
    if (f)
        fclose(f);
    return mhz > 0 ? mhz : 2600;
}

#endif
