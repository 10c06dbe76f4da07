/* deltanet: the Gated DeltaNet recurrence of one value head, in its two
 * forms (the decoder's mixer, model/decoder.c). Per token t, with q, k of
 * dk values (L2-normalized, q scaled), v of dv values, log-decay g < 0 and
 * beta in (0, 1), the state S [dk][dv] evolves as
 *
 *   S = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q.
 *
 * lilac_dn_recurrent takes one token; lilac_dn_chunk takes up to
 * LILAC_DN_CHUNK at once in the chunked (WY) form, which is the same
 * recurrence up to float32 rounding, as a few dense products through the
 * kernel set's gemm_f32. */
#ifndef LILAC_MODEL_DELTANET_H
#define LILAC_MODEL_DELTANET_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/cpu.h"

#define LILAC_DN_CHUNK 64

/* Floats of scratch lilac_dn_chunk needs (>= what lilac_dn_recurrent needs). */
size_t lilac_dn_scratch_floats(int dk, int dv);

/* One token; tmp holds dv floats. */
void lilac_dn_recurrent(float *S, const float *q, const float *k, const float *v, float g, float beta, int dk,
                        int dv, float *o, float *tmp);

/* L <= LILAC_DN_CHUNK tokens: token i's q at q + i * ldx (k, v alike), its
 * output at o + i * ldo; g[i], beta[i]. buf: lilac_dn_scratch_floats. */
void lilac_dn_chunk(const lilac_cpu_kernels *kern, float *S, const float *q, const float *k, const float *v,
                    int64_t ldx, const float *g, const float *beta, int L, int dk, int dv, float *o, int64_t ldo,
                    float *buf);

#endif
