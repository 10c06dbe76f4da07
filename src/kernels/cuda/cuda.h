/* cuda: the CUDA kernels, callable from C. Built only where CMake finds
 * nvcc (LILAC_CUDA defined); elsewhere src/kernels/cuda_none.c answers
 * every entry point with "built without CUDA". Pointers marked (dev) are
 * device memory; every call is asynchronous on the given stream (NULL: the
 * default stream) unless it says otherwise.
 *
 * Weights are uploaded once in the file's own encoding (F32, F16, BF16,
 * Q8_0, Q4_0, Q4_K, Q5_K, Q6_K: lilac_dtype values) and dequantized inside
 * the kernels, never expanded in memory. Activations are float32. */
#ifndef LILAC_KERNELS_CUDA_CUDA_H
#define LILAC_KERNELS_CUDA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lilac_cuda_stream lilac_cuda_stream; /* a cudaStream_t */

/* A weight matrix in device memory: rows of cols values of type, row_bytes apart. */
typedef struct lilac_cuda_mat {
    const void *data; /* (dev) */
    int type;
    int64_t rows, cols;
    size_t row_bytes;
} lilac_cuda_mat;

/* What a build without the CUDA backend answers. */
#define LILAC_NO_CUDA_MSG "lilac was built without CUDA (configured with LILAC_CUDA=OFF, or no nvcc was found)"

/* Whether a CUDA device can be used; why not in msg (size cap) when it cannot. */
int lilac_cuda_available(char *msg, size_t cap);
/* The device's name, memory and compute capability for messages and `doctor`. */
int lilac_cuda_device_info(char *name, size_t cap, size_t *total_bytes, size_t *free_bytes, int *cc_major,
                           int *cc_minor);

/* Memory and copies; 0 on success, -1 with msg filled. */
int lilac_cuda_malloc(void **p, size_t bytes, char *msg, size_t cap);
void lilac_cuda_free(void *p);
/* Page-locked host memory (copies to and from it run at the bus's speed); 0 or -1. */
int lilac_cuda_host_alloc(void **p, size_t bytes);
void lilac_cuda_host_free(void *p);
/* The sampler's reduction of `rows` rows of V logits (`stride` floats apart) on the device (cuda_sample.cu): row
 * r's k best and log-sum-exp as a lilac_logits_top at scratch + r LILAC_CUDA_TOP_OUT (scratch:
 * lilac_cuda_top_bytes(V, k, rows) bytes, cuda_sizes.h), for one download. -1 (nothing launched) for a shape it
 * does not take. */
int lilac_cuda_logits_top(const float *logits, int V, int rows, long long stride, int k, void *scratch,
                          lilac_cuda_stream *s);
/* Whether p is page-locked host memory the device copies to directly (cudaMallocHost's or registered). */
int lilac_cuda_host_pinned(const void *p);
int lilac_cuda_upload(void *dst_dev, const void *src_host, size_t bytes, char *msg, size_t cap);
int lilac_cuda_download(void *dst_host, const void *src_dev, size_t bytes, lilac_cuda_stream *s, char *msg,
                        size_t cap); /* waits for s first */
int lilac_cuda_memset(void *dst_dev, int value, size_t bytes, lilac_cuda_stream *s);
int lilac_cuda_sync(lilac_cuda_stream *s, char *msg, size_t cap);
int lilac_cuda_stream_new(lilac_cuda_stream **s, char *msg, size_t cap);
void lilac_cuda_stream_free(lilac_cuda_stream *s);

/* The architecture the kernels that run on this device were compiled for,
 * as major * 10 + minor (cudaFuncAttributes' ptxVersion: 90 for an sm_90a
 * build, 80 for an sm_80 build run on an H100 from its PTX); 0 if unknown. */
int lilac_cuda_code_arch(void);

/* Whether kernels are launched dependent (programmatic dependent launch:
 * a kernel starts, and fetches its weights, while the one before it ends):
 * where the device and the code that runs on it are sm_90 or later
 * (lilac_cuda_code_arch: griddep_wait() waits only there), unless
 * LILAC_CUDA_PDL=0. */
int lilac_cuda_pdl(void);

/* The instrumented kernels' own timeline (kernels/cuda/cuda_trace.cuh,
 * model/cuda_trace.h): begin waits for the device, makes room for cap
 * events and turns recording on; end waits for the device, turns it off and
 * hands back the events (*ev: malloc'd) and how many did not fit. Not while
 * a stream is being captured. 0, or -1 with msg. */
struct lilac_trace_ev;
int lilac_cuda_trace_begin(size_t cap, char *msg, size_t mcap);
int lilac_cuda_trace_end(struct lilac_trace_ev **ev, size_t *n, uint64_t *dropped, char *msg, size_t mcap);
/* The launches this thread has made through the dependent-launch helpers (cuda_dev.cuh: launch_dependent,
 * launch_pdl), each noted with its blocks: lilac_cuda_launch_note (the helpers' call), and the count so far with
 * the blocks of the last min(n, LILAC_CUDA_LAUNCH_NOTES) of them in last[], oldest first (the trace's names take
 * them: a launch's name then knows its grid). */
#define LILAC_CUDA_LAUNCH_NOTES 8
void lilac_cuda_launch_note(unsigned blocks);
unsigned long lilac_cuda_launch_notes(unsigned *last, int n);

/* Whether the kernels handle a type (lilac_dtype). */
int lilac_cuda_type_supported(int type);

/* y[t][r] = dot(W row r, x[t]) for t < n_tok, r < W->rows; x [n_tok][cols], y [n_tok][rows] (dev). */
void lilac_cuda_matvec(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s);
/* lilac_cuda_matvec for each of n_mat matrices over the same x: y[i] = W[i] x. The tensor-core path converts
 * x once for all of them (a prefill's projections of one normed x). */
void lilac_cuda_matvec_multi(const lilac_cuda_mat *const *W, float *const *y, int n_mat, const float *x, int n_tok,
                             lilac_cuda_stream *s);

/* Routed experts of one layer stored one after another, expert e's matrix
 * at base + e * expert_stride bytes (each expert W->rows x W->cols, W->data
 * being expert 0). For i < k: y[i] = W[idx[i]] . x[x_stride ? i : 0]
 * (x rows cols apart when x_stride is set, else one shared row), y rows
 * W->rows apart. idx (dev) is read on the device: no host round trip. */
void lilac_cuda_matvec_experts(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                               const float *x, int x_stride, float *y, lilac_cuda_stream *s);

/* The one-token product with the step's neighbours folded in: as
 * lilac_cuda_matvec_experts (idx set, k slots) or lilac_cuda_matvec (idx
 * NULL, k = 1), where the input is silu(x) * x2 elementwise when x2 is set
 * (the SwiGLU of a gate and an up product; x2 laid out as x), and y += the
 * product when accumulate is set (a residual add) instead of y = it. */
void lilac_cuda_matvec_fused(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                             const float *x, const float *x2, int x_stride, float *y, int accumulate,
                             lilac_cuda_stream *s);

/* The decode step's routed down product with the experts' sum and the next norm (LILAC_CUDA_DOWN_SUM=0: off): x +=
 * sum_i wt[i] (W[idx[i]] . silu(g_i) u_i) (g_i, u_i: rows W->cols apart), + wt[k] sh where sh (the shared
 * expert's output) is set, in lilac_cuda_moe_sum_norm_grid's order; then xn = RMSNorm(x) * norm_w (norm_w set;
 * part: LILAC_CUDA_DOWN_SUM_MAXB floats, count: one unsigned, zero before the first call and after each), one
 * kernel. 0 when launched; -1 when it does not take the call (k over 8, the type, alignment or shape): then
 * nothing ran. */
int lilac_cuda_moe_down_sum(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k, const float *g,
                            const float *u, const float *wt, const float *sh, float *x, const float *norm_w, float *xn,
                            float eps, float *part, unsigned *count, lilac_cuda_stream *s);
/* The same for n tokens at once, each of its own step (the batched decode, LILAC_CUDA_BATCH_EXACT): row t's idx,
 * wt, g and u idx_row, wt_row and gu_row elements on from row 0's, its x, sh and xn W->rows floats, its part
 * LILAC_CUDA_PART_MAXB floats, its count one unsigned; the same kernel as one token's (its bits). */
int lilac_cuda_moe_down_sum_batch(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int k,
                                  const float *g, const float *u, const float *wt, const float *sh, float *x,
                                  const float *norm_w, float *xn, float eps, float *part, unsigned *count, int n,
                                  long long idx_row, long long wt_row, long long gu_row, lilac_cuda_stream *s);
/* Its rows a lane group (LILAC_CUDA_DOWN_SUM_R, 2 by default or 1; the same bits). */
int lilac_cuda_moe_down_sum_r(void);
/* One-token dense products with more row tiles than blocks streamed through shared memory two tiles ahead
 * (k_mv_pipe; on by default, LILAC_CUDA_MV_PIPE=0 off): the switch set now (returns the previous setting), the
 * launches so far, and whether this device and build can (sm_90 code: the bulk copies). */
int lilac_cuda_mv_pipe_set(int on);
long lilac_cuda_mv_pipe_launches(void);
int lilac_cuda_mv_pipe_usable(void);
/* Q6_K's in their ring form (k_mv_ring, counted as k_mv_pipe's launches; LILAC_CUDA_MV_RING=c, configuration c
 * of lilac_cuda_mv_ring_count(), 1 by default, 0 k_mv_pipe): set now (returns the previous one; out of range: 0). */
int lilac_cuda_mv_ring_set(int c);
int lilac_cuda_mv_ring_count(void);
/* lilac_cuda_matvec_fused's product (idx set: `slots` slots, n_tok 1; idx NULL: slots 1, n_tok tokens, x rows
 * and y rows W->cols and W->rows apart) with every dot in the order the one-token product of `like` (W's type
 * and columns; its experts like_stride bytes apart) over like_slots slots would take: lanes a row from that
 * product's shape, and the folds' explicit roundings, give each row the one-token step's bits (the batched
 * decode's LILAC_CUDA_BATCH_EXACT; like may be a matrix W is part of: the step's joined products). Always on
 * the CUDA cores. */
void lilac_cuda_matvec_like(const lilac_cuda_mat *W, size_t expert_stride, const int32_t *idx, int slots,
                            const float *x, int x_stride, const float *x2, float *y, int n_tok, int accumulate,
                            const lilac_cuda_mat *like, size_t like_stride, int like_slots, lilac_cuda_stream *s);
/* How many times a fused kernel was launched (tests: that the fused path, not its fallback, ran). */
enum { LILAC_CUDA_FUSED_DOWN_SUM, LILAC_CUDA_FUSED_KINDS };
long lilac_cuda_fused_launches(int kind);

/* out[c] = value c of row r of W, c < cols (dev): an embedding lookup with r read on the device from *r_dev. */
void lilac_cuda_get_row(const lilac_cuda_mat *W, const int32_t *r_dev, float *out, lilac_cuda_stream *s);

/* Prefill (a chunk of n tokens of one sequence). out[i][c] = value c of row r_dev[i] of W, i < n <= 65535. */
void lilac_cuda_get_rows(const lilac_cuda_mat *W, const int32_t *r_dev, int n, float *out, lilac_cuda_stream *s);

/* The routed experts' product over (token, expert) pairs grouped by expert:
 * the pairs of expert e are offsets[e] .. offsets[e + 1] - 1 (offsets: n_expert
 * + 1 ints, dev), and y row i (W->rows floats apart) = W[e] . x row
 * rows_of_x[i] (dev; NULL: row i), x rows x_stride floats apart; n_x: the
 * rows of x rows_of_x indexes (its values below it; <= 0: unknown), with
 * which the tensor-core path converts x once a row instead of once a pair
 * (a pair whose row is out of range gets NaN there). Experts as
 * in lilac_cuda_matvec_experts. Each expert's weights are read once per
 * pass of up to 8 pairs, not once per pair; max_pairs, an upper bound of
 * any expert's pairs (the tokens), picks the pass size. A pair's sums are
 * those of the one-token product (on the CUDA cores; see the tensor-core
 * path below). n_pairs bounds offsets[n_expert] (<= 0: unknown). */
void lilac_cuda_matvec_grouped(const lilac_cuda_mat *W, size_t expert_stride, int n_expert, const int32_t *offsets,
                               const int32_t *rows_of_x, int n_x, int max_pairs, int n_pairs, const float *x,
                               long long x_stride, float *y, lilac_cuda_stream *s);

/* The tensor-core products (cuda_mma.cu): Q4_K, Q5_K, Q6_K, Q8_0 and Q4_0
 * with K a multiple of 256, results that agree with float32 to rounding
 * (the activations split into two fp16 digits, the block scales applied in
 * float32). lilac_cuda_matvec takes them from lilac_cuda_mma_min_tokens()
 * tokens on, lilac_cuda_matvec_grouped when max_pairs >= lilac_cuda_mma_min_pairs()
 * and n_pairs (an upper bound of offsets[n_expert], the pairs in all; <= 0:
 * unknown) is set, unless LILAC_CUDA_MMA=0 or lilac_cuda_mma_set_enabled(0).
 * Their scratch (the activations' digits) is a device buffer per stream,
 * grown outside graph capture. */
int lilac_cuda_mma_supported(int type);
int lilac_cuda_mma_enabled(void);
/* The scratch of stream s grown to at least bytes now (outside graph capture): 0, or -1 on failure. Its
 * generation counts its allocations: a graph captured with the scratch is stale once the generation moves. */
int lilac_cuda_mma_reserve(lilac_cuda_stream *s, size_t bytes);
unsigned lilac_cuda_mma_scratch_gen(lilac_cuda_stream *s);
/* A scratch buffer of stream s of a kind (one buffer a device, stream and kind) of at least bytes, grown to
 * the largest request so far: NULL where it would have to grow while s is being captured, or on failure. */
enum { LILAC_CUDA_SCR_MMA = 0, LILAC_CUDA_SCR_ATTN = 1 };
void *lilac_cuda_scratch(lilac_cuda_stream *s, int kind, size_t bytes);
/* Every scratch buffer of stream s freed (after its work) and its slot given back: lilac_cuda_stream_free does
 * it. lilac_cuda_scratch_entries: the (device, stream, kind) buffers held now (a test's). */
void lilac_cuda_scratch_release(lilac_cuda_stream *s);
int lilac_cuda_scratch_entries(void);
/* The products' pre-pass alone (a test's): n rows of x (x_stride floats apart; with x2 the SwiGLU silu(x) x2)
 * of K columns (a multiple of 256) to digits, sums and exponents in out (lilac_cuda_xq_bytes(n, K) bytes), by
 * k_mma_prep or, with quarter, k_mma_prep_q (which must give the same bytes). 0, or -1 for bad arguments. */
int lilac_cuda_mma_prep_into(const float *x, const float *x2, long long x_stride, int n, int K, int quarter,
                             void *out, lilac_cuda_stream *s);
int lilac_cuda_mma_set_enabled(int on); /* returns the previous setting */
int lilac_cuda_mma_min_tokens(void);
int lilac_cuda_mma_min_pairs(void);
/* The tensor-core path itself, whatever the token count: 0 when launched, -1 when it does not take the call
 * (type, shape, alignment, scratch): then nothing was launched but possibly the pre-pass, and no error is set. */
int lilac_cuda_matvec_mma(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s);
/* The same; same_x: x is unchanged since the previous product on s, which read it too (lilac_cuda_matvec_multi):
 * its conversion for the tensor cores is reused where s's scratch still holds exactly it. */
int lilac_cuda_matvec_mma_x(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, int same_x,
                            lilac_cuda_stream *s);
int lilac_cuda_matvec_grouped_mma(const lilac_cuda_mat *W, size_t expert_stride, int n_expert,
                                  const int32_t *offsets, const int32_t *rows_of_x, int n_x, int max_pairs, int n_pairs,
                                  const float *x, long long x_stride, float *y, lilac_cuda_stream *s);
/* The grouped product (a pair a row of x, rows_of_x NULL) of the SwiGLU silu(g) u, g and u [pairs][x_stride], its
 * pre-pass computing it (k_swiglu's bits; nothing written to g): 0 when the tensor cores took it, -1 when they do not
 * (too few pairs, type, shape, LILAC_CUDA_MMA=0: nothing launched; the caller runs lilac_cuda_swiglu and
 * lilac_cuda_matvec_grouped). _mma: the tensor-core path whatever the pairs. */
int lilac_cuda_matvec_grouped_glu(const lilac_cuda_mat *W, size_t expert_stride, int n_expert, const int32_t *offsets,
                                  int max_pairs, int n_pairs, const float *g, const float *u, long long x_stride,
                                  float *y, lilac_cuda_stream *s);
int lilac_cuda_matvec_grouped_glu_mma(const lilac_cuda_mat *W, size_t expert_stride, int n_expert,
                                      const int32_t *offsets, int max_pairs, int n_pairs, const float *g,
                                      const float *u, long long x_stride, float *y, lilac_cuda_stream *s);

/* The decode products of Q4_K rows on the tensor cores (cuda_mma.cu's k_mvt; LILAC_CUDA_MV_TC=1, off by
 * default): the rows staged in shared memory before the kernel before ends, each token's x split into hi and lo
 * fp16 digits by the warp that takes a super-block (scaled by a power of two of that super-block's largest value),
 * a token as two n8 columns of the mma (hi, lo). Each token's result is the same bits
 * whatever the token count (a chunk of up to 8 a launch), so the batched step's rows stay its one-token bits.
 * lilac_cuda_matvec takes it for up to 8 tokens, and lilac_cuda_matvec_like for any count when the product it
 * stands for is one it takes. _takes: whether it takes W (type, shape, alignment, the switch, an sm_90 device);
 * lilac_cuda_matvec_tc: y (+)= W x for n_tok tokens (x 16-byte aligned, tokens cols floats apart, y's rows
 * apart): 0 when launched, -1 when it does not take the call (nothing launched, no error set).
 * lilac_cuda_mv_tc_set: the switch (returns the previous setting). */
int lilac_cuda_matvec_tc_takes(const lilac_cuda_mat *W);
int lilac_cuda_matvec_tc(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, int accumulate,
                         lilac_cuda_stream *s);
int lilac_cuda_mv_tc_set(int on);
/* k_mvt's rows a block (LILAC_CUDA_MV_TC_ROWS): 32, 16, or 0 (16 where 32-row blocks would be fewer than two a
 * multiprocessor); returns the previous setting. A row's bits are the same at any. */
int lilac_cuda_mv_tc_rows_set(int rows);
/* The fewest rows a matrix k_mvt takes has (LILAC_CUDA_MV_TC_MIN_ROWS; 0: any); returns the previous setting. */
int lilac_cuda_mv_tc_min_rows_set(int rows);

/* Float weights (F32, F16, BF16) with many tokens (cuda_gemm.cu): a tiled float32 GEMM that reads each weight
 * once per 64 tokens; lilac_cuda_matvec takes it from lilac_cuda_gemm_min_tokens() tokens on (LILAC_CUDA_GEMM=0:
 * never). lilac_cuda_matvec_gemm: 0 when launched, -1 when it does not take the call (type, shape, alignment). */
int lilac_cuda_gemm_min_tokens(void);
int lilac_cuda_matvec_gemm(const lilac_cuda_mat *W, const float *x, float *y, int n_tok, lilac_cuda_stream *s);

/* The calls above return nothing: a call they refuse (NULL pointers, an unsupported type, a bad shape)
 * launches nothing and is remembered, per thread, with any launch error. 0 when there was none since the
 * last check; else -1 with the first reason in msg, and cleared. Errors while kernels run show at the next
 * lilac_cuda_sync or lilac_cuda_download. An idx[i] or *r_dev out of range is not detected: idx must name
 * experts that exist; get_row writes NaN for an r outside [0, rows). */
int lilac_cuda_check(char *msg, size_t cap);

/* Seconds one lilac_cuda_matvec(W, x, y, n_tok) takes on the default stream: the best of reps, timed with
 * CUDA events after a warm-up, x and y its own. Synchronous; < 0 on failure. For benchmarks and tests. */
double lilac_cuda_bench_matvec(const lilac_cuda_mat *W, int n_tok, int reps);
/* Seconds a product of a burst of `burst` one after another on a stream (launched dependent where the products
 * are; best of reps bursts): through k_mvt (tc) or the CUDA-core k_mv path (lilac_cuda_matvec with the tensor-core
 * switches off); < 0 where it failed or k_mvt does not take W. */
double lilac_cuda_bench_matvec_burst(const lilac_cuda_mat *W, int tc, int burst, int reps);

#ifdef __cplusplus
}
#endif
#endif
