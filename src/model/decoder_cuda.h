/* decoder_cuda: the forward pass on a CUDA GPU — the weights uploaded once
 * in their file encoding, each sequence's KV cache and DeltaNet state in
 * device memory, one token per step (the recurrent form of the delta
 * rule), the same math as decoder.c with float32 activations. Compiled to
 * refusals where lilac was built without CUDA. */
#ifndef LILAC_MODEL_DECODER_CUDA_H
#define LILAC_MODEL_DECODER_CUDA_H

#include "lilac.h"

typedef struct lilac_cuda_model lilac_cuda_model;
typedef struct lilac_cuda_seq lilac_cuda_seq;

/* Upload m's weights. LILAC_E_UNSUPPORTED (with why) when lilac has no
 * CUDA, no device can be used, a weight type has no CUDA kernel, or the
 * device lacks the memory. */
lilac_status lilac_cuda_model_new(lilac_model *m, lilac_cuda_model **out, lilac_error *err);
void lilac_cuda_model_free(lilac_cuda_model *cm);
/* "NVIDIA H200 (139.8 GiB, sm_90)" for messages. */
const char *lilac_cuda_model_device(const lilac_cuda_model *cm);
/* The device memory cm holds: weights, the step's and (once allocated) the prefill's buffers. */
uint64_t lilac_cuda_model_bytes(const lilac_cuda_model *cm);
/* The rows the prefill's buffers take when first allocated (the GPU plan's choice, lilac_mem_report.pf_rows);
 * no effect once they are. LILAC_CUDA_PREFILL_CHUNK over them still wins (lilac_cuda_pf_rows). */
void lilac_cuda_model_pf_rows_set(lilac_cuda_model *cm, int rows);
/* The tokens one prefill chunk takes: the buffers' rows once allocated, else those they will take (the plan's
 * or LILAC_CUDA_PREFILL_CHUNK's, at least PF_MAX); 0 for NULL or without CUDA. */
int lilac_cuda_model_prompt_rows(const lilac_cuda_model *cm);

lilac_status lilac_cuda_seq_new(lilac_model *m, int n_ctx, lilac_cuda_seq **out, lilac_error *err);
void lilac_cuda_seq_free(lilac_cuda_seq *cs);
void lilac_cuda_seq_reset(lilac_model *m, lilac_cuda_seq *cs);
lilac_status lilac_cuda_seq_copy(lilac_model *m, lilac_cuda_seq *dst, const lilac_cuda_seq *src, int pos,
                                 lilac_error *err);

struct lilac_seq;
/* The tokens one at a time at the sequence's position. */
lilac_status lilac_cuda_eval(struct lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                             lilac_error *err);

#endif
