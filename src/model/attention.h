/* attention: one step's softmax attention of nt tokens over their
 * sequences' KV caches on the CPU, through the kernel set's attention
 * kernels (kernels/cpu/attn.h), split over the thread pool.
 *
 * A token's keys go in ranges whose length depends only on how many keys
 * it has (lilac_attn_chunk); each range's partial softmax state is folded
 * into the previous ones in order. With few (token, KV head) rows — decode
 * has one token and a few KV heads — the ranges are tasks of their own
 * (flash-decoding) and are folded after the parallel run; otherwise a row
 * is one task that folds as it goes. The arithmetic is the same either
 * way, so the result does not depend on the thread count or on which other
 * tokens share the step. */
#ifndef LILAC_MODEL_ATTENTION_H
#define LILAC_MODEL_ATTENTION_H

#include <stddef.h>

#include "kernels/cpu/cpu.h"
#include "util/pool.h"

/* Partial states kept for a split step, and the most (token, KV head)
 * rows a step splits. */
#define LILAC_ATTN_PARTS 64
#define LILAC_ATTN_SPLIT_ROWS 16

typedef struct lilac_attn_step {
    const lilac_cpu_kernels *kern;
    int n_head, n_head_kv, head_dim;
    int kv_type;               /* LILAC_KV_F32 / LILAC_KV_F16 */
    int nt;                    /* tokens */
    const float *q;            /* token t's head h at q + t * q_stride + h * q_step */
    int q_stride, q_step;
    const void *const *kv;     /* [nt][2]: row 0 of the K and of the V cache token t reads */
    const int *pos;            /* [nt]: token t attends to keys [0, pos[t]] */
    float *out;                /* [nt][n_head * head_dim] */
    float *per_thread;         /* [threads][per_thread_floats], >= lilac_attn_thread_floats */
    size_t per_thread_floats;
    float *parts;              /* [n_parts][lilac_attn_part_floats] */
    int n_parts;
} lilac_attn_step;

/* Floats of one partial state ([g][hd] + max and sum per head), and the
 * per-thread scratch lilac_attn_run needs. */
size_t lilac_attn_part_floats(int n_head, int n_head_kv, int head_dim);
size_t lilac_attn_thread_floats(int n_head, int n_head_kv, int head_dim);
/* Keys per range for a token with n keys. */
int lilac_attn_chunk(int n);

void lilac_attn_run(lilac_pool *pool, const lilac_attn_step *a);

#endif
