/* cuda_ops: the model's elementwise and per-head operations on the GPU
 * (cuda_ops.cu), callable from C. Pointers are device memory; every call is
 * asynchronous on the given stream. Position-dependent calls read the
 * position on the device (pos), so one captured graph serves every step. */
#ifndef LILAC_KERNELS_CUDA_CUDA_OPS_H
#define LILAC_KERNELS_CUDA_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

void lilac_cuda_rmsnorm(const float *x, const float *w, float *y, int rows, int n, float eps, lilac_cuda_stream *s);
void lilac_cuda_add(float *x, const float *y, int n, lilac_cuda_stream *s);
void lilac_cuda_attention(const float *q, int q_step, const float *K, const float *V, const int *pos, int n_head,
                          int n_head_kv, int hd, float *out, float *scratch, int scratch_stride, float *part, int gated,
                          lilac_cuda_stream *s);
size_t lilac_cuda_attention_part_floats(int n_head, int hd);
int lilac_cuda_capture_begin(lilac_cuda_stream *s);
int lilac_cuda_capture_end(lilac_cuda_stream *s, void **exec);
int lilac_cuda_graph_launch(void *exec, lilac_cuda_stream *s);
void lilac_cuda_graph_free(void *exec);
void lilac_cuda_conv_step(const float *in, float *state, const float *w, float *out, int C, int K,
                          lilac_cuda_stream *s);
/* Per row of dv (rows of them): o = RMSNorm(o) * w * silu(z), z laid out as o. */
void lilac_cuda_gated_norm(float *o, const float *z, const float *w, int rows, int dv, float eps, lilac_cuda_stream *s);
void lilac_cuda_swiglu(float *g, const float *u, int n, lilac_cuda_stream *s);
int lilac_cuda_copy(void *dst, const void *src, size_t bytes, lilac_cuda_stream *s);
int lilac_cuda_upload_async(void *dst, const void *src, size_t bytes, lilac_cuda_stream *s);
int lilac_cuda_last_error(char *msg, size_t cap);

/* The fused one-token step. Events order a second stream (fork: `to` waits
 * for what `from` has queued so far); inside a stream capture they become
 * the graph's branches. */
int lilac_cuda_event_new(void **ev);
void lilac_cuda_event_free(void *ev);
void lilac_cuda_fork(lilac_cuda_stream *from, lilac_cuda_stream *to, void *ev);
/* The router's softmax over E logits, the top k (ties to the lower index) listed in expert-index order as the
 * CPU adds them, weights renormalized when norm; with up_offset > 0 also idx[k + i] = idx[i] + up_offset, and
 * with gate_inp w[k] = sigmoid(gate_inp . xn) (the shared expert's gate), or without it but with gate_logit
 * w[k] = sigmoid(*gate_logit) (that dot computed elsewhere: lilac_cuda_norm_router's row E). -1 (nothing
 * launched) when E > 512 or k > 32. */
int lilac_cuda_route(const float *logits, int E, int k, int norm, int32_t *idx, float *w, int up_offset,
                     const float *gate_inp, const float *xn, int n_embd, const float *gate_logit, lilac_cuda_stream *s);
/* The routing lilac_cuda_norm_router can end with (by its last block, dev_route: no
 * kernel of its own on the step's chain): lilac_cuda_route's over logits[0, E), with the shared expert's gate
 * w[k] = sigmoid(logits[E]) when shared_row (the router given E + 1 rows: its own, then the shared expert's
 * gate_inp). count: device memory, zero before the first launch (the last block sets it back). */
typedef struct lilac_cuda_route_args {
    int E, k, norm, up_offset, shared_row;
    int32_t *idx;
    float *w;
    unsigned *count;
} lilac_cuda_route_args;
/* xn = RMSNorm(x) * norm_w and logits[r] = W[r] . xn for a float32 router W (n_exp rows of row_floats floats) in
 * one kernel, then the routing when route is set; -1 (nothing launched) for a shape it does not take (n or rows
 * not a multiple of 4 floats, W not 16-byte aligned, a routing lilac_cuda_route would refuse). */
int lilac_cuda_norm_router(const float *x, const float *norm_w, float *xn, const float *W, long long row_floats,
                           int n_exp, float *logits, int n, float eps, const lilac_cuda_route_args *route,
                           lilac_cuda_stream *s);
/* lilac_cuda_matvec_experts over the experts lilac_cuda_route would choose from logits (route: E, k, norm,
 * up_offset, shared_row; 2k slots where up_offset > 0), each block routing for itself, block 0 writing the
 * choice to route->idx and route->w as lilac_cuda_route does (the same bits): the route kernel off the step's
 * chain. -1 (nothing launched) where the fast product kernel does not take W or the routing its shape. */
int lilac_cuda_matvec_experts_routed(const lilac_cuda_mat *W, size_t expert_stride, const float *logits,
                                     const lilac_cuda_route_args *route, const float *x, float *y,
                                     lilac_cuda_stream *s);
/* The same over a grid of blocks (x bit for bit the same; the norm's sum of squares in another order): part
 * holds a float a block of LILAC_CUDA_SUM_GRID_T values (device), count one unsigned (device, zero before the
 * first launch; each launch leaves it zero). -1 (nothing launched) for E over LILAC_CUDA_SUM_GRID_MAXB blocks
 * (cuda_sizes.h). */
int lilac_cuda_moe_sum_norm_grid(float *x, const float *ex, const float *w, int k, const float *sh,
                                 const float *gsh, const float *norm_w, float *xn, int E, float eps, float *part,
                                 unsigned *count, lilac_cuda_stream *s);
/* x += sum_i w[i] ex[i] (+ *gsh sh); then xn = RMSNorm(x) * norm_w when norm_w is set. */
void lilac_cuda_moe_sum_norm(float *x, const float *ex, const float *w, int k, const float *sh, const float *gsh,
                             const float *norm_w, float *xn, int E, float eps, lilac_cuda_stream *s);
/* Per head RMSNorm (q_norm, k_norm) and NeoX rotary on the first rot dims at *pos, of the q heads (q_step
 * floats apart) and the k heads, and this position's K and V rows stored into the caches: one launch. */
void lilac_cuda_norm_rope_kv(float *q, const float *q_norm, int q_step, int nh, float *k, const float *v,
                             const float *k_norm, float *K, float *V, int nkv, int hd, int rot, const int *pos,
                             float theta, float eps, lilac_cuda_stream *s);
/* The DeltaNet step after the conv, for one token, in one kernel: q and k of conv_out L2-normalized (q also
 * by 1/sqrt(dk)), the gates g = ssm_a * softplus(a + ssm_dt) and beta = sigmoid(b), the delta rule on S, and
 * o = RMSNorm(S^T q) * norm_w * silu(z); conv_out is left as it is. -1 (nothing launched) for shapes it does not
 * take (dv * 8 > 1024, dv not a multiple of 32, dk > 256): lilac_cuda_pf_deltanet with n = 1 takes those. */
int lilac_cuda_deltanet_fused(const float *conv_out, const float *a, const float *b, const float *ssm_a,
                              const float *ssm_dt, float *S, float *o, const float *z, const float *norm_w, int nk,
                              int nv, int dk, int dv, int tiled, float eps, lilac_cuda_stream *s);
/* Batched decode: row t (of n) is one token of its own sequence, at position pos[t] (dev), with that sequence's
 * state from the pointer arrays (dev, n entries); activations [n][width] as lilac_cuda_pf_*. */
void lilac_cuda_norm_rope_kv_rows(float *q, const float *q_norm, int q_step, long long q_tok, int nh, float *k,
                                  const float *v, long long kv_tok, const float *k_norm, float *const *Kp,
                                  float *const *Vp, int nkv, int hd, int rot, const int *pos, float theta, float eps,
                                  int n, lilac_cuda_stream *s);
/* The parts buffer lilac_cuda_attention_rows needs for n rows (floats); the call is -1 (nothing launched) for a
 * shape it does not take. */
size_t lilac_cuda_attention_rows_part_floats(int n_head, int hd, int n);
/* nsplit 0: LILAC_CUDA_ATT_SPLIT_ROWS ranges of 64+ keys (the part buffer above); else nsplit ranges of
 * min_keys+ keys, n_head nsplit (hd + 2) floats of parts a row: lilac_cuda_attention_ranges' values give each
 * row the one-token step's ranges, and so its bits (the same kernels). */
int lilac_cuda_attention_rows(const float *q, int q_step, long long q_tok, float *const *Kp, float *const *Vp,
                              const int *pos, int n_head, int n_head_kv, int hd, float *out, float *part, int gated,
                              int n, int nsplit, int min_keys, lilac_cuda_stream *s);
/* The one-token attention's key ranges: the most (LILAC_CUDA_ATT_RANGES) and the fewest keys a range
 * (LILAC_CUDA_ATT_KEYS), read from the environment at each call. */
void lilac_cuda_attention_ranges(int *nsplit, int *min_keys);
/* The key ranges a row of n_keys keys takes, at most nsplit of at least min_keys keys (the kernels' own count). */
int lilac_cuda_attention_ranges_used(int n_keys, int nsplit, int min_keys);
/* The batched decode's rows with the one-token step's kernels (LILAC_CUDA_BATCH_EXACT), each the same kernel as
 * its one-token call with blockIdx a row (the same bits): lilac_cuda_route for n rows (logits and the gate logit
 * l_row floats apart, idx i_row, w w_row, xn n_embd); lilac_cuda_norm_router without the routing for `rows` rows
 * (x, xn n apart, logits l_row); lilac_cuda_moe_sum_norm and _grid for n rows (ex ex_row floats apart, w and gsh
 * w_row, x, sh, xn E; the grid's part LILAC_CUDA_PART_MAXB floats, count one). -1 (nothing launched) for
 * what the one-token call would refuse. */
int lilac_cuda_route_rows(const float *logits, int E, int k, int norm, int32_t *idx, float *w, int up_offset,
                          const float *gate_inp, const float *xn, int n_embd, const float *gate_logit, int n,
                          long long l_row, long long i_row, long long w_row, lilac_cuda_stream *s);
int lilac_cuda_norm_router_rows(const float *x, const float *norm_w, float *xn, const float *W, long long row_floats,
                                int n_exp, float *logits, long long l_row, int n, float eps, int rows,
                                lilac_cuda_stream *s);
void lilac_cuda_moe_sum_norm_rows(float *x, const float *ex, const float *w, int k, const float *sh, const float *gsh,
                                  const float *norm_w, float *xn, int E, float eps, int n, long long ex_row,
                                  long long w_row, lilac_cuda_stream *s);
int lilac_cuda_moe_sum_norm_grid_rows(float *x, const float *ex, const float *w, int k, const float *sh,
                                      const float *gsh, const float *norm_w, float *xn, int E, float eps, float *part,
                                      unsigned *count, int n, long long ex_row, long long w_row, lilac_cuda_stream *s);
void lilac_cuda_conv_step_rows(const float *in, float *const *statep, const float *w, float *out, int C, int K, int n,
                               lilac_cuda_stream *s);
int lilac_cuda_deltanet_rows(const float *conv_out, const float *a, const float *b, const float *ssm_a,
                             const float *ssm_dt, float *const *Sp, float *o, const float *z, const float *norm_w,
                             int nk, int nv, int dk, int dv, int tiled, float eps, int n, lilac_cuda_stream *s);

/* ---- prefill (cuda_prefill.cu): the n tokens of a chunk of one sequence at
 * positions pos0 .. pos0 + n - 1 (host values: a prefill is not captured),
 * activations [n][width]. The math of the one-token calls above, row by row. */
/* norm_rope for n tokens, token t's heads at v + t * tok_stride, rotated at position pos0 + t. */
void lilac_cuda_pf_norm_rope(float *v, const float *w, int n_heads, int step, long long tok_stride, int hd, int rot,
                             int pos0, float theta, float eps, int n, lilac_cuda_stream *s);
/* Whether lilac_cuda_pf_attention takes head size hd. */
int lilac_cuda_pf_attention_supported(int hd);
/* Causal attention: query t (heads q_step floats apart, tokens q_tok apart; the gate after the hd query values
 * when gated) over keys 0 .. pos0 + t of the caches K, V (rows n_head_kv * hd, already holding the chunk's);
 * out [n][n_head * hd]. -1 (nothing launched) for a shape it does not take. */
int lilac_cuda_pf_attention(const float *q, int q_step, long long q_tok, const float *K, const float *V, int n_head,
                            int n_head_kv, int hd, int pos0, int n, float *out, int gated, lilac_cuda_stream *s);
/* lilac_cuda_pf_attention runs the first of these that takes the shape: the tensor-core kernel (cuda_attn.cu:
 * 3xTF32, float32 accuracy; hd 64, 128 or 256, n_head / n_head_kv <= 8, 16-byte aligned pointers and strides)
 * unless LILAC_CUDA_ATTN_MMA=0 (lilac_cuda_attn_mma_enabled, read once), else the CUDA-core one (any hd
 * lilac_cuda_pf_attention_supported takes). Each alone for tests; -1 (nothing launched) for a shape it
 * does not take. */
int lilac_cuda_attn_mma_enabled(void);
/* The tensor-core kernel's calls that split K and V once (k_attn_f16p) so far, and whether the switches ask for
 * it (LILAC_CUDA_ATTN_PRE, LILAC_CUDA_ATTN_F16 not 0): a test checks that it ran. */
long lilac_cuda_attn_pre_launches(void);
int lilac_cuda_attn_pre_wanted(void);
int lilac_cuda_pf_attention_mma(const float *q, int q_step, long long q_tok, const float *K, const float *V,
                                int n_head, int n_head_kv, int hd, int pos0, int n, float *out, int gated,
                                lilac_cuda_stream *s);
int lilac_cuda_pf_attention_simt(const float *q, int q_step, long long q_tok, const float *K, const float *V,
                                 int n_head, int n_head_kv, int hd, int pos0, int n, float *out, int gated,
                                 lilac_cuda_stream *s);
/* Rows [n][2 w] of two joined products (ab: a's w columns, then b's) into a and b, [n][w] each. */
void lilac_cuda_pf_split_cols(const float *ab, int w, float *a, float *b, int n, lilac_cuda_stream *s);
/* The causal conv of n rows of C channels with SiLU (out [n][C]), then the state (K - 1 rows) advanced by n. */
void lilac_cuda_pf_conv(const float *in, float *state, const float *w, float *out, int C, int K, int n,
                        lilac_cuda_stream *s);
/* lilac_cuda_deltanet_fused's step for n tokens in order (conv_out normalized in place): conv_out [n][C] (C
 * floats a row), a, b [n][nv], o and z [n][nv * dv]. */
void lilac_cuda_pf_deltanet(float *conv_out, int C, float *a, float *b, const float *ssm_a, const float *ssm_dt,
                            float *S, float *o, const float *z, const float *norm_w, int nk, int nv, int dk, int dv,
                            int tiled, float eps, int n, float *tp, lilac_cuda_stream *s);
/* lilac_cuda_pf_deltanet with the recurrence's form chosen: chunked != 0 the chunked form (64-token
 * sub-chunks, LILAC_CUDA_DN_CHUNK=1's) where it takes the shape (dk, dv multiples of 32, dk <= 192), the
 * recurrent kernel otherwise. norm_w NULL: o is the recurrence's output, not gated-normed (for tests). 1 if
 * the chunked form ran. lilac_cuda_pf_deltanet takes the chunked form under LILAC_CUDA_DN_CHUNK=1 for 16 tokens
 * or more. tp (16-aligned, lilac_cuda_dn_tp_floats(nv, n) floats, or NULL): the chunked form computes every
 * sub-chunk's T and P there first, all at once, instead of in each of a head's blocks in turn. */
int lilac_cuda_pf_deltanet_form(float *conv_out, int C, float *a, float *b, const float *ssm_a, const float *ssm_dt,
                                float *S, float *o, const float *z, const float *norm_w, int nk, int nv, int dk, int dv,
                                int tiled, float eps, int n, int chunked, float *tp, lilac_cuda_stream *s);
/* Whether the chunked form with T and P first runs on the tensor cores (3xTF32; dk <= 128, a multiple of 16):
 * its results are float32's to rounding, not the CUDA-core kernel's bits. LILAC_CUDA_DN_TC=0: off. */
int lilac_cuda_dn_tc_enabled(void);
/* Up to bytes of the tensor-core products' scratch of stream s (cuda_mma.cu), for a caller's temporary use on s
 * between products: NULL where it holds fewer bytes (it does not grow here). The pre-pass's memo of the digits it
 * holds is dropped. */
void *lilac_cuda_mma_scratch_borrow(lilac_cuda_stream *s, size_t bytes);
/* The float GEMM's launches so far that split K (cuda_gemm.cu, LILAC_CUDA_GEMM_SPLIT=1). */
long lilac_cuda_gemm_split_launches(void);
/* The F32 GEMM's launches so far on the tensor cores (cuda_gemm.cu's k_gemm_tc, LILAC_CUDA_GEMM_TC=1). */
long lilac_cuda_gemm_tc_launches(void);
/* lilac_cuda_sync_probe's findings (cuda_probe.cu): microseconds a phase of a chain of dependent kernels (a CUDA
 * graph; staged: each block's work loaded before its griddepcontrol.wait) and of one persistent kernel whose phases
 * wait on device-scope counters (prefetch: the work loaded before the wait); check[v]: a hash of variant v's last
 * phase values (last: the last variant's, the first 256 blocks'), which the caller compares with its own. */
typedef struct {
    int blocks;
    double us_chain, us_chain_staged, us_persist, us_persist_prefetch;
    unsigned check[4];
    int last[256];
} lilac_cuda_sync_probe_result;
/* phases phases of a block an SM, each block reading work_bytes of its own a phase (a multiple of 4096, up to
 * 65536) and every block's value of the phase before; reps timed runs of each variant. 0, or -1 with msg. */
int lilac_cuda_sync_probe(int phases, int reps, int work_bytes, lilac_cuda_sync_probe_result *r, char *msg,
                          size_t cap);
/* cuda_wgmma.cuh's assumptions checked on the GPU: d (64 x 128) = a (64 x K, row-major) times b (128 x K,
 * row-major: b's rows are the product's columns)^T, both rounded to fp16, by one warpgroup's wgmma with A from
 * registers and B in shared memory as cuda_wgmma.cuh describes it. K a multiple of 16 up to 64. 0, or -1 with
 * msg (no sm_90a build or device, a CUDA error). */
int lilac_cuda_wgmma_probe(const float *a, const float *b, float *d, int K, char *msg, size_t cap);
/* Whether the routing calls below take E experts, k a token (k <= 64). */
int lilac_cuda_pf_moe_supported(int n_expert, int k);
/* topk for n tokens: logits [n][E], idx and w [n][k]. */
void lilac_cuda_pf_topk(const float *logits, int E, int k, int norm, int n, int32_t *idx, float *w,
                        lilac_cuda_stream *s);
/* The n * k (token, expert) pairs of idx grouped by expert, tokens ascending within one: offsets [E + 1],
 * pair_tok [n * k] (the token of each pair), tok_pair [n * k] (the pair of each token's slot). */
void lilac_cuda_pf_moe_group(const int32_t *idx, int n, int k, int E, int32_t *offsets, int32_t *pair_tok,
                             int32_t *tok_pair, lilac_cuda_stream *s);
/* The same, and the pairs again as experts E .. 2E - 1 (gate and up of one allocation in one grouped
 * product: up expert e at gate index E + e): offsets [2E + 1] with offsets[E + e] = P + offsets[e], P =
 * offsets[E] the pairs in all (n k when every idx is in [0, E)), pair_tok [2 n k] with pair_tok[P + i] =
 * pair_tok[i]. */
void lilac_cuda_pf_moe_group_gu(const int32_t *idx, int n, int k, int E, int32_t *offsets, int32_t *pair_tok,
                                int32_t *tok_pair, lilac_cuda_stream *s);
/* Pair i = t k + j (token t's j-th slot) as a row of its own: xp [n k][E] gets x's row t, tok_pair [n k] the
 * identity (for lilac_cuda_pf_moe_sum); E a multiple of 4. */
void lilac_cuda_pf_pair_rows(const float *x, int n, int k, int E, float *xp, int32_t *tok_pair, lilac_cuda_stream *s);
/* moe_sum for n tokens: token t adds w[t][i] * ex[tok_pair[t][i]] for its slots i in order (+ the shared expert). */
void lilac_cuda_pf_moe_sum(float *x, const float *ex, const float *w, const int32_t *tok_pair, int k, const float *sh,
                           const float *gate_inp, const float *xn, int E, int n, lilac_cuda_stream *s);

#ifdef __cplusplus
}
#endif
#endif
