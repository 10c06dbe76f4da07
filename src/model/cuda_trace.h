/* cuda_trace: the timeline of one CUDA decode step as the kernels record it
 * themselves (LILAC_CUDA_TRACE=1, decoder_cuda.c): thread 0 of every block
 * of an instrumented kernel writes an event at the block's start, after its
 * griddepcontrol.wait, and at its end (kernels/cuda/cuda_trace.cuh). This
 * file turns the events into the table of launches; plain C, built with or
 * without CUDA (tests/test_cuda_trace.c). */
#ifndef LILAC_MODEL_CUDA_TRACE_H
#define LILAC_MODEL_CUDA_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What an event marks. */
/* MARK1/MARK2: two points inside a block's work that a kernel may record (cuda_trace.cuh's TRACE_MARK1/2), for
 * the per-block view (LILAC_CUDA_TRACE_BLOCKS) */
enum { LILAC_TRACE_START = 0, LILAC_TRACE_WAITED = 1, LILAC_TRACE_END = 2, LILAC_TRACE_MARK1 = 3, LILAC_TRACE_MARK2 = 4 };
/* The kinds: a block's slots in the device's ring (one a kind, cuda_trace.cuh). */
#define LILAC_TRACE_KINDS 5

/* The instrumented kernels (lilac_trace_kernel_name). */
enum {
    LILAC_TK_NONE = 0,
    LILAC_TK_MV,
    LILAC_TK_MV_SCALAR,
    LILAC_TK_GET_ROW,
    LILAC_TK_RMSNORM,
    LILAC_TK_NORM_ROPE_KV,
    LILAC_TK_ATT_GQA,
    LILAC_TK_ATT_PART,
    LILAC_TK_ATT_COMBINE,
    LILAC_TK_CONV_STEP,
    LILAC_TK_DN_FUSED,
    LILAC_TK_ROUTE,
    LILAC_TK_NORM_ROUTER,
    LILAC_TK_MOE_SUM_NORM,
    LILAC_TK_MOE_DOWN_SUM,
    LILAC_TK_MVT,
    LILAC_TK_COUNT
};

/* One event, as the device writes it (24 bytes). t: %globaltimer (ns);
 * gridid: %gridid, unique per launch; block: the linear block index. */
typedef struct lilac_trace_ev {
    uint64_t gridid;
    uint64_t t;
    uint32_t block;
    uint16_t smid;
    uint8_t kind;   /* LILAC_TRACE_* */
    uint8_t kernel; /* LILAC_TK_* */
} lilac_trace_ev;

/* A block's three times (t_waited 0: it recorded no wait: a kernel launched
 * without PDL, or a block that had no work). */
typedef struct lilac_trace_rec {
    uint64_t gridid;
    uint32_t smid, block, kernel;
    uint64_t t_start, t_waited, t_end;
    uint64_t t_mark[2]; /* the earliest MARK1, MARK2 (0: none) */
} lilac_trace_rec;

/* A launch: its blocks' records grouped by gridid. Times in microseconds
 * from the step's first start; wait_med_us < 0: no block waited; gap_us:
 * from the previous launch's (by start) last end to this one's first start
 * (negative: they overlapped). */
typedef struct lilac_trace_launch {
    uint64_t gridid;
    int kernel, blocks, incomplete; /* incomplete: blocks missing a start or an end */
    double start_us, end_us, dur_us, wait_med_us, wait_max_us, gap_us;
} lilac_trace_launch;

const char *lilac_trace_kernel_name(int kernel);

/* The events' blocks into out (room for n): one record per (gridid, block),
 * the earliest start and wait and the latest end. Returns the count. */
size_t lilac_trace_assemble(const lilac_trace_ev *ev, size_t n, lilac_trace_rec *out);

/* The records' launches into out (room for n records' worth), ordered by
 * first start; rec is sorted in place. Returns the count. */
size_t lilac_trace_launches(lilac_trace_rec *rec, size_t n, lilac_trace_launch *out);

/* The kernels an operation of decoder_cuda.c's step() launches, in order
 * (at most 2; LILAC_TK_NONE where any fits). Returns their count. */
int lilac_trace_op_kernels(const char *op, int kernels[2]);

/* An expected launch, from the step's operations in launch order. */
typedef struct lilac_trace_name {
    const char *op;
    int layer;  /* -1: outside the layers */
    int branch; /* 0: the main stream, 1: the second one */
    int kernel; /* LILAC_TK_*, NONE: any */
    int blocks; /* the launch's blocks as the host launched it (lilac_cuda_launch_notes), 0: not known */
} lilac_trace_name;

/* Totals of a table (lilac_trace_write prints them too). */
typedef struct lilac_trace_totals {
    double step_us, main_dur_us, main_gap_us, all_gap_us, timer_ns;
    int launches, mismatched;
} lilac_trace_totals;

/* The names of the launches (L in start order) in out[k] (an index of names, -1: none): launch order taken for
 * start order, except that a launch takes the first of the next few names not yet taken whose kernel fits and
 * whose blocks (where known) are its own, so that two launches of one kernel on the two streams that start in
 * the other order keep their names. Returns how many launches got a name. */
size_t lilac_trace_match(const lilac_trace_launch *L, size_t n, const lilac_trace_name *names, size_t n_names,
                         long *out);
/* The table: launch k named by lilac_trace_match, and the totals; dropped events are reported. Returns the
 * totals. */
lilac_trace_totals lilac_trace_write(FILE *f, const lilac_trace_launch *L, size_t n, const lilac_trace_name *names,
                                     size_t n_names, const lilac_trace_rec *rec, size_t n_rec, uint64_t dropped);

#ifdef __cplusplus
}
#endif

#endif
