/* The CUDA decode-step trace's table (model/cuda_trace.c) from synthetic
 * events: blocks assembled, launches grouped by gridid and ordered by first
 * start, durations, median waits, gaps and totals. No GPU needed. */
#include <math.h>
#include <string.h>

#include "model/cuda_trace.h"
#include "testutil.h"

#define NEAR(a, b) (fabs((double)(a) - (double)(b)) < 1e-9)

static lilac_trace_ev E(uint64_t grid, uint32_t block, int kind, int kernel, uint64_t t)
{
    return (lilac_trace_ev){grid, t, block, (uint16_t)(block % 7), (uint8_t)kind, (uint8_t)kernel};
}

int main(void)
{
    enum { S = LILAC_TRACE_START, W = LILAC_TRACE_WAITED, X = LILAC_TRACE_END };
    /* A: gridid 100, k_mv, 2 blocks (a second, later wait of block 0 is ignored);
     * C: gridid 200, attention, 3 blocks, starts while A runs;
     * B: gridid 50 (lower, yet last to start), rmsnorm, no wait. Shuffled. */
    lilac_trace_ev ev[] = {
        E(200, 2, X, LILAC_TK_ATT_GQA, 9000),  E(100, 0, S, LILAC_TK_MV, 1000),      E(50, 0, X, LILAC_TK_RMSNORM, 10000),
        E(100, 1, W, LILAC_TK_MV, 1300),       E(200, 0, S, LILAC_TK_ATT_GQA, 4000), E(100, 0, W, LILAC_TK_MV, 1800),
        E(100, 0, W, LILAC_TK_MV, 1500),       E(200, 1, S, LILAC_TK_ATT_GQA, 4100), E(100, 1, S, LILAC_TK_MV, 1200),
        E(100, 0, X, LILAC_TK_MV, 5000),       E(200, 2, S, LILAC_TK_ATT_GQA, 4200), E(200, 0, W, LILAC_TK_ATT_GQA, 4100),
        E(200, 1, W, LILAC_TK_ATT_GQA, 4400),  E(200, 2, W, LILAC_TK_ATT_GQA, 5200), E(100, 1, X, LILAC_TK_MV, 5200),
        E(200, 0, X, LILAC_TK_ATT_GQA, 8000),  E(50, 0, S, LILAC_TK_RMSNORM, 9500),  E(200, 1, X, LILAC_TK_ATT_GQA, 8500),
    };
    const size_t n = sizeof ev / sizeof ev[0];
    lilac_trace_rec rec[32];
    lilac_trace_launch L[32];
    size_t nr = lilac_trace_assemble(ev, n, rec);
    CHECKF(nr == 6, "%zu blocks", nr);
    for (size_t i = 0; i < nr; i++)
        if (rec[i].gridid == 100 && rec[i].block == 0)
            CHECKF(rec[i].t_start == 1000 && rec[i].t_waited == 1500 && rec[i].t_end == 5000 &&
                       rec[i].kernel == LILAC_TK_MV && rec[i].smid == 0,
                   "block 0 of A: %llu %llu %llu", (unsigned long long)rec[i].t_start,
                   (unsigned long long)rec[i].t_waited, (unsigned long long)rec[i].t_end);
    size_t nl = lilac_trace_launches(rec, nr, L);
    CHECKF(nl == 3, "%zu launches", nl);
    CHECK(L[0].gridid == 100 && L[1].gridid == 200 && L[2].gridid == 50);
    CHECK(L[0].blocks == 2 && L[1].blocks == 3 && L[2].blocks == 1);
    CHECK(L[0].kernel == LILAC_TK_MV && L[1].kernel == LILAC_TK_ATT_GQA && L[2].kernel == LILAC_TK_RMSNORM);
    CHECK(!L[0].incomplete && !L[1].incomplete && !L[2].incomplete);
    CHECKF(NEAR(L[0].start_us, 0) && NEAR(L[0].dur_us, 4.2), "A %g %g", L[0].start_us, L[0].dur_us);
    CHECKF(NEAR(L[1].start_us, 3.0) && NEAR(L[1].dur_us, 5.0), "C %g %g", L[1].start_us, L[1].dur_us);
    CHECKF(NEAR(L[2].start_us, 8.5) && NEAR(L[2].dur_us, 0.5), "B %g %g", L[2].start_us, L[2].dur_us);
    /* medians: A of 0.5 and 0.1 (even: the mean of the middle two), C of 0.1, 0.3, 1.0; B none */
    CHECKF(NEAR(L[0].wait_med_us, 0.3) && NEAR(L[0].wait_max_us, 0.5), "A wait %g", L[0].wait_med_us);
    CHECKF(NEAR(L[1].wait_med_us, 0.3) && NEAR(L[1].wait_max_us, 1.0), "C wait %g", L[1].wait_med_us);
    CHECK(L[2].wait_med_us < 0);
    /* gaps: C starts 1.2 us before A's last end; B 0.5 us after C's */
    CHECKF(NEAR(L[0].gap_us, 0) && NEAR(L[1].gap_us, -1.2) && NEAR(L[2].gap_us, 0.5), "gaps %g %g", L[1].gap_us,
           L[2].gap_us);

    int k[2];
    CHECK(lilac_trace_op_kernels("attention", k) == 2 && k[0] == LILAC_TK_ATT_GQA && k[1] == LILAC_TK_ATT_COMBINE);
    CHECK(lilac_trace_op_kernels("matvec_experts", k) == 1 && k[0] == LILAC_TK_MV);
    CHECK(lilac_trace_op_kernels("no such op", k) == 1 && k[0] == LILAC_TK_NONE);
    CHECK(!strcmp(lilac_trace_kernel_name(LILAC_TK_MOE_SUM_NORM), "k_moe_sum_norm"));
    CHECK(!strcmp(lilac_trace_kernel_name(999), "?"));

    /* the table: A and B on the main path, C on the second stream */
    lilac_trace_name names[] = {{"matvec", 0, 0, LILAC_TK_MV, 0},
                                {"attention", 0, 1, LILAC_TK_ATT_GQA, 0},
                                {"rmsnorm", 1, 0, LILAC_TK_RMSNORM, 0}};
    FILE *f = tmpfile();
    CHECK(f != NULL);
    lilac_trace_totals T = lilac_trace_write(f, L, nl, names, 3, rec, nr, 0);
    CHECKF(NEAR(T.step_us, 9.0), "step %g", T.step_us);
    CHECKF(NEAR(T.main_dur_us, 4.7) && NEAR(T.main_gap_us, 4.3), "main %g %g", T.main_dur_us, T.main_gap_us);
    CHECKF(NEAR(T.all_gap_us, -0.7), "gaps %g", T.all_gap_us);
    CHECKF(NEAR(T.timer_ns, 100), "timer %g", T.timer_ns);
    CHECK(T.launches == 3 && T.mismatched == 0);
    char buf[8192] = "";
    if (f) {
        rewind(f);
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        buf[got] = 0;
        fclose(f);
    }
    CHECK(strstr(buf, "k_attention_gqa") && strstr(buf, "rmsnorm") && strstr(buf, "launch order"));
    CHECK(!strstr(buf, " !"));
    if (tu_failures)
        fputs(buf, stderr);

    /* a name that does not fit its kernel is marked; missing ends are counted */
    names[2].kernel = LILAC_TK_ROUTE;
    T = lilac_trace_write(NULL, L, nl, names, 3, rec, nr, 0);
    CHECK(T.mismatched == 1);
    lilac_trace_ev part[] = {E(7, 0, S, LILAC_TK_MV, 100), E(7, 1, S, LILAC_TK_MV, 110), E(7, 1, X, LILAC_TK_MV, 300)};
    nr = lilac_trace_assemble(part, 3, rec);
    nl = lilac_trace_launches(rec, nr, L);
    CHECK(nr == 2 && nl == 1 && L[0].blocks == 2 && L[0].incomplete == 1 && NEAR(L[0].dur_us, 0.2));
    CHECK(lilac_trace_assemble(NULL, 0, rec) == 0 && lilac_trace_launches(rec, 0, L) == 0);

    /* two k_mv launches of the two streams that start in the other order than launched keep their names by their
     * blocks; without blocks known, launch order; a name of another kernel is passed over for one that fits */
    lilac_trace_name two[] = {{"matvec", 3, 1, LILAC_TK_MV, 384},
                              {"matvec", 3, 0, LILAC_TK_MV, 4},
                              {"conv_step", 3, 0, LILAC_TK_CONV_STEP, 0}};
    lilac_trace_launch L2[3];
    memset(L2, 0, sizeof L2);
    L2[0].kernel = LILAC_TK_MV, L2[0].blocks = 4, L2[0].start_us = 1;
    L2[1].kernel = LILAC_TK_MV, L2[1].blocks = 384, L2[1].start_us = 2;
    L2[2].kernel = LILAC_TK_CONV_STEP, L2[2].blocks = 32, L2[2].start_us = 3;
    long pick[3];
    CHECK(lilac_trace_match(L2, 3, two, 3, pick) == 3);
    CHECKF(pick[0] == 1 && pick[1] == 0 && pick[2] == 2, "by blocks: %ld %ld %ld", pick[0], pick[1], pick[2]);
    two[0].blocks = two[1].blocks = 0;
    CHECK(lilac_trace_match(L2, 3, two, 3, pick) == 3);
    CHECKF(pick[0] == 0 && pick[1] == 1 && pick[2] == 2, "launch order: %ld %ld %ld", pick[0], pick[1], pick[2]);
    L2[0].kernel = LILAC_TK_CONV_STEP; /* the conv first: it takes the conv's name, the products theirs */
    L2[1].kernel = L2[2].kernel = LILAC_TK_MV;
    CHECK(lilac_trace_match(L2, 3, two, 3, pick) == 3);
    CHECKF(pick[0] == 2 && pick[1] == 0 && pick[2] == 1, "past a misfit: %ld %ld %ld", pick[0], pick[1], pick[2]);
    CHECK(lilac_trace_match(L2, 3, two, 2, pick) == 2 && pick[2] == -1); /* more launches than names */
    TEST_END();
}
