/* cuda_none: the entry points of kernels/cuda/cuda.h for a lilac built
 * without CUDA (CMake found no nvcc, or LILAC_CUDA=OFF). Nothing is ever
 * available: every call that can fail fails, saying why; the rest do
 * nothing. */
#ifndef LILAC_CUDA

#include <stdio.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_ops.h"

#define NO_CUDA LILAC_NO_CUDA_MSG

static int no_cuda(char *msg, size_t cap)
{
    if (msg && cap)
        snprintf(msg, cap, "%s", NO_CUDA);
    return -1;
}

int lilac_cuda_available(char *msg, size_t cap)
{
    no_cuda(msg, cap);
    return 0;
}

int lilac_cuda_device_info(char *name, size_t cap, size_t *total_bytes, size_t *free_bytes, int *cc_major,
                           int *cc_minor)
{
    if (total_bytes)
        *total_bytes = 0;
    if (free_bytes)
        *free_bytes = 0;
    if (cc_major)
        *cc_major = 0;
    if (cc_minor)
        *cc_minor = 0;
    return no_cuda(name, cap);
}

int lilac_cuda_malloc(void **p, size_t bytes, char *msg, size_t cap)
{
    (void)bytes;
    *p = NULL;
    return no_cuda(msg, cap);
}

void lilac_cuda_free(void *p) { (void)p; }

int lilac_cuda_upload(void *dst_dev, const void *src_host, size_t bytes, char *msg, size_t cap)
{
    (void)dst_dev, (void)src_host, (void)bytes;
    return no_cuda(msg, cap);
}

int lilac_cuda_download(void *dst_host, const void *src_dev, size_t bytes, lilac_cuda_stream *s, char *msg,
                        size_t cap)
{
    (void)dst_host, (void)src_dev, (void)bytes, (void)s;
    return no_cuda(msg, cap);
}

int lilac_cuda_memset(void *dst_dev, int value, size_t bytes, lilac_cuda_stream *s)
{
    (void)dst_dev, (void)value, (void)bytes, (void)s;
    return -1;
}

int lilac_cuda_sync(lilac_cuda_stream *s, char *msg, size_t cap)
{
    (void)s;
    return no_cuda(msg, cap);
}

int lilac_cuda_stream_new(lilac_cuda_stream **s, char *msg, size_t cap)
{
    *s = NULL;
    return no_cuda(msg, cap);
}

void lilac_cuda_stream_free(lilac_cuda_stream *s) { (void)s; }

int lilac_cuda_type_supported(int type)
{
    (void)type;
    return 0;
}

void lilac_cuda_matvec(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s)
{
    (void)W, (void)x, (void)y, (void)n_tok, (void)s;
}

void lilac_cuda_matvec_multi(const lilac_cuda_mat *const *W, float *const *y, int n_mat, const float *x, int n_tok,
                             lilac_cuda_stream *s)
{
    (void)W, (void)y, (void)n_mat, (void)x, (void)n_tok, (void)s;
}

void lilac_cuda_matvec_experts(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                               const float *x, int x_stride, float *y, lilac_cuda_stream *s)
{
    (void)W, (void)expert_stride, (void)idx, (void)k, (void)x, (void)x_stride, (void)y, (void)s;
}

void lilac_cuda_matvec_fused(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                             const float *x, const float *x2, int x_stride, float *y, int accumulate,
                             lilac_cuda_stream *s)
{
    (void)W, (void)expert_stride, (void)idx, (void)k, (void)x, (void)x2, (void)x_stride, (void)y, (void)accumulate,
        (void)s;
}

int lilac_cuda_moe_down_sum(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k, const float *g,
                            const float *u, const float *wt, const float *sh, float *x, const float *norm_w, float *xn,
                            float eps, float *part, unsigned *count, lilac_cuda_stream *s)
{
    (void)W, (void)expert_stride, (void)idx, (void)k, (void)g, (void)u, (void)wt, (void)sh, (void)x, (void)norm_w;
    (void)xn, (void)eps, (void)part, (void)count, (void)s;
    return -1;
}

int lilac_cuda_moe_down_sum_batch(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                                  const float *g, const float *u, const float *wt, const float *sh, float *x,
                                  const float *norm_w, float *xn, float eps, float *part, unsigned *count, int n,
                                  long long idx_row, long long wt_row, long long gu_row, lilac_cuda_stream *s)
{
    (void)W, (void)expert_stride, (void)idx, (void)k, (void)g, (void)u, (void)wt, (void)sh, (void)x, (void)norm_w;
    (void)xn, (void)eps, (void)part, (void)count, (void)n, (void)idx_row, (void)wt_row, (void)gu_row, (void)s;
    return -1;
}

int lilac_cuda_moe_down_sum_r(void) { return 2; }

int lilac_cuda_mv_pipe_set(int on)
{
    (void)on;
    return 0;
}
long lilac_cuda_mv_pipe_launches(void) { return 0; }
int lilac_cuda_mv_pipe_usable(void) { return 0; }
int lilac_cuda_mv_ring_set(int c)
{
    (void)c;
    return 0;
}
int lilac_cuda_mv_ring_count(void) { return 0; }

void lilac_cuda_matvec_like(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int slots,
                            const float *x, int x_stride, const float *x2, float *y, int n_tok, int accumulate,
                            const lilac_cuda_mat *like, size_t like_stride, int like_slots, lilac_cuda_stream *s)
{
    (void)W, (void)expert_stride, (void)idx, (void)slots, (void)x, (void)x_stride, (void)x2, (void)y, (void)n_tok;
    (void)accumulate, (void)like, (void)like_stride, (void)like_slots, (void)s;
}

long lilac_cuda_fused_launches(int kind)
{
    (void)kind;
    return 0;
}

int lilac_cuda_moe_sum_norm_grid(float *x, const float *ex, const float *w, int k, const float *sh, const float *gsh,
                                 const float *norm_w, float *xn, int E, float eps, float *part, unsigned *count,
                                 lilac_cuda_stream *s)
{
    (void)x, (void)ex, (void)w, (void)k, (void)sh, (void)gsh, (void)norm_w, (void)xn, (void)E, (void)eps, (void)part,
        (void)count, (void)s;
    return -1;
}

int lilac_cuda_code_arch(void) { return 0; }
int lilac_cuda_pdl(void) { return 0; }
int lilac_cuda_trace_begin(size_t cap, char *msg, size_t mcap)
{
    (void)cap;
    return no_cuda(msg, mcap);
}
int lilac_cuda_trace_end(struct lilac_trace_ev **ev, size_t *n, uint64_t *dropped, char *msg, size_t mcap)
{
    *ev = NULL, *n = 0, *dropped = 0;
    return no_cuda(msg, mcap);
}
void lilac_cuda_launch_note(unsigned blocks) { (void)blocks; }
unsigned long lilac_cuda_launch_notes(unsigned *last, int n)
{
    (void)last, (void)n;
    return 0;
}

int lilac_cuda_host_alloc(void **p, size_t bytes)
{
    (void)bytes;
    *p = NULL;
    return -1;
}

void lilac_cuda_host_free(void *p) { (void)p; }

int lilac_cuda_logits_top(const float *logits, int V, int rows, long long stride, int k, void *scratch,
                          lilac_cuda_stream *s)
{
    (void)logits, (void)V, (void)rows, (void)stride, (void)k, (void)scratch, (void)s;
    return -1;
}

int lilac_cuda_host_pinned(const void *p)
{
    (void)p;
    return 0;
}

void lilac_cuda_get_row(const lilac_cuda_mat *W, const int32_t *r_dev, float *out, lilac_cuda_stream *s)
{
    (void)W, (void)r_dev, (void)out, (void)s;
}

void lilac_cuda_get_rows(const lilac_cuda_mat *W, const int32_t *r_dev, int n, float *out, lilac_cuda_stream *s)
{
    (void)W, (void)r_dev, (void)n, (void)out, (void)s;
}

void lilac_cuda_matvec_grouped(const lilac_cuda_mat *W, size_t expert_stride, int n_expert, const int32_t *offsets,
                               const int32_t *rows_of_x, int n_x, int max_pairs, int n_pairs, const float *x,
                               long long x_stride, float *y, lilac_cuda_stream *s)
{
    (void)W, (void)expert_stride, (void)n_expert, (void)offsets, (void)rows_of_x, (void)n_x, (void)max_pairs,
        (void)n_pairs, (void)x, (void)x_stride, (void)y, (void)s;
}

int lilac_cuda_mma_supported(int type)
{
    (void)type;
    return 0;
}

int lilac_cuda_mma_enabled(void) { return 0; }

int lilac_cuda_mma_reserve(lilac_cuda_stream *s, size_t bytes)
{
    (void)s, (void)bytes;
    return -1;
}

unsigned lilac_cuda_mma_scratch_gen(lilac_cuda_stream *s)
{
    (void)s;
    return 0;
}

void *lilac_cuda_scratch(lilac_cuda_stream *s, int kind, size_t bytes)
{
    (void)s, (void)kind, (void)bytes;
    return NULL;
}

void lilac_cuda_scratch_release(lilac_cuda_stream *s) { (void)s; }

int lilac_cuda_scratch_entries(void) { return 0; }

int lilac_cuda_mma_prep_into(const float *x, const float *x2, long long x_stride, int n, int K, int quarter,
                             void *out, lilac_cuda_stream *s)
{
    (void)x, (void)x2, (void)x_stride, (void)n, (void)K, (void)quarter, (void)out, (void)s;
    return -1;
}

int lilac_cuda_mma_set_enabled(int on)
{
    (void)on;
    return 0;
}

int lilac_cuda_mma_min_tokens(void) { return 0; }

int lilac_cuda_gemm_min_tokens(void) { return 0; }

int lilac_cuda_matvec_gemm(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s)
{
    (void)W, (void)x, (void)y, (void)n_tok, (void)s;
    return -1;
}

int lilac_cuda_mma_min_pairs(void) { return 0; }

int lilac_cuda_matvec_mma(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s)
{
    (void)W, (void)x, (void)y, (void)n_tok, (void)s;
    return -1;
}

int lilac_cuda_matvec_mma_x(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, int same_x,
                            lilac_cuda_stream *s)
{
    (void)W, (void)x, (void)y, (void)n_tok, (void)same_x, (void)s;
    return -1;
}

int lilac_cuda_matvec_grouped_mma(const lilac_cuda_mat *W, size_t expert_stride, int n_expert,
                                  const int32_t *offsets, const int32_t *rows_of_x, int n_x, int max_pairs, int n_pairs,
                                  const float *x, long long x_stride, float *y, lilac_cuda_stream *s)
{
    (void)W, (void)expert_stride, (void)n_expert, (void)offsets, (void)rows_of_x, (void)n_x, (void)max_pairs,
        (void)n_pairs, (void)x, (void)x_stride, (void)y, (void)s;
    return -1;
}

int lilac_cuda_matvec_grouped_glu(const lilac_cuda_mat *W, size_t expert_stride, int n_expert, const int32_t *offsets,
                                  int max_pairs, int n_pairs, const float *g, const float *u, long long x_stride,
                                  float *y, lilac_cuda_stream *s)
{
    return lilac_cuda_matvec_grouped_glu_mma(W, expert_stride, n_expert, offsets, max_pairs, n_pairs, g, u, x_stride,
                                             y, s);
}

int lilac_cuda_matvec_grouped_glu_mma(const lilac_cuda_mat *W, size_t expert_stride, int n_expert,
                                      const int32_t *offsets, int max_pairs, int n_pairs, const float *g,
                                      const float *u, long long x_stride, float *y, lilac_cuda_stream *s)
{
    (void)W, (void)expert_stride, (void)n_expert, (void)offsets, (void)max_pairs, (void)n_pairs, (void)g, (void)u,
        (void)x_stride, (void)y, (void)s;
    return -1;
}

int lilac_cuda_check(char *msg, size_t cap) { return no_cuda(msg, cap); }

double lilac_cuda_bench_matvec(const lilac_cuda_mat *W, int n_tok, int reps)
{
    (void)W, (void)n_tok, (void)reps;
    return -1.0;
}

double lilac_cuda_bench_matvec_burst(const lilac_cuda_mat *W, int tc, int burst, int reps)
{
    (void)W, (void)tc, (void)burst, (void)reps;
    return -1.0;
}

int lilac_cuda_matvec_tc_takes(const lilac_cuda_mat *W)
{
    (void)W;
    return 0;
}

int lilac_cuda_matvec_tc(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, int accumulate,
                         lilac_cuda_stream *s)
{
    (void)W, (void)x, (void)y, (void)n_tok, (void)accumulate, (void)s;
    return -1;
}

int lilac_cuda_mv_tc_set(int on)
{
    (void)on;
    return 0;
}

int lilac_cuda_mv_tc_rows_set(int rows)
{
    (void)rows;
    return 32;
}

int lilac_cuda_mv_tc_min_rows_set(int rows)
{
    (void)rows;
    return 0;
}

#endif
