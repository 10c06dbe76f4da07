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
void lilac_cuda_norm_rope(float *v, const float *w, int n_heads, int step, int hd, int rot, const int *pos,
                          float theta, float eps, lilac_cuda_stream *s);
void lilac_cuda_kv_store(float *K, float *V, const float *k, const float *v, int kvw, const int *pos,
                         lilac_cuda_stream *s);
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
void lilac_cuda_deltanet_step(float *conv_out, float *a, float *b, const float *ssm_a, const float *ssm_dt, float *S,
                              float *o, const float *z, const float *norm_w, int nk, int nv, int dk, int dv, int tiled,
                              float eps, lilac_cuda_stream *s);
void lilac_cuda_topk(const float *logits, int E, int k, int norm, int32_t *idx, float *w, lilac_cuda_stream *s);
void lilac_cuda_swiglu(float *g, const float *u, int n, lilac_cuda_stream *s);
void lilac_cuda_moe_sum(float *x, const float *ex, const float *w, int k, const float *sh, const float *gate_inp,
                        const float *xn, int E, lilac_cuda_stream *s);
int lilac_cuda_copy(void *dst, const void *src, size_t bytes, lilac_cuda_stream *s);
int lilac_cuda_upload_async(void *dst, const void *src, size_t bytes, lilac_cuda_stream *s);
int lilac_cuda_last_error(char *msg, size_t cap);

/* The fused one-token step. Events order a second stream (fork: `to` waits
 * for what `from` has queued so far); inside a stream capture they become
 * the graph's branches. */
int lilac_cuda_event_new(void **ev);
void lilac_cuda_event_free(void *ev);
void lilac_cuda_fork(lilac_cuda_stream *from, lilac_cuda_stream *to, void *ev);
/* lilac_cuda_topk by one warp, and with up_offset > 0 idx[k + i] = idx[i] + up_offset, and with gate_inp
 * w[k] = sigmoid(gate_inp . xn). -1 (nothing launched) when E > 512 or k > 32. */
int lilac_cuda_route(const float *logits, int E, int k, int norm, int32_t *idx, float *w, int up_offset,
                     const float *gate_inp, const float *xn, int n_embd, lilac_cuda_stream *s);
/* x += sum_i w[i] ex[i] (+ *gsh sh); then xn = RMSNorm(x) * norm_w when norm_w is set. */
void lilac_cuda_moe_sum_norm(float *x, const float *ex, const float *w, int k, const float *sh, const float *gsh,
                             const float *norm_w, float *xn, int E, float eps, lilac_cuda_stream *s);
/* lilac_cuda_norm_rope of the q heads and the k heads, and kv_store, in one launch. */
void lilac_cuda_norm_rope_kv(float *q, const float *q_norm, int q_step, int nh, float *k, const float *v,
                             const float *k_norm, float *K, float *V, int nkv, int hd, int rot, const int *pos,
                             float theta, float eps, lilac_cuda_stream *s);
/* lilac_cuda_deltanet_step in one kernel, conv_out left as it is. -1 (nothing launched) for shapes it does
 * not take (dv * 8 > 1024, dv not a multiple of 32, dk > 256). */
int lilac_cuda_deltanet_fused(const float *conv_out, const float *a, const float *b, const float *ssm_a,
                              const float *ssm_dt, float *S, float *o, const float *z, const float *norm_w, int nk,
                              int nv, int dk, int dv, int tiled, float eps, lilac_cuda_stream *s);

#ifdef __cplusplus
}
#endif
#endif
