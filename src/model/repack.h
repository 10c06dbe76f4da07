/* repack: Q4_K / Q6_K matrices in the CPU's 16-row interleaved layout
 * (kernels/cpu/qr16.h), made once at load (model/repack.c). */
#ifndef LILAC_MODEL_REPACK_H
#define LILAC_MODEL_REPACK_H

#include "model/model.h"

/* lilac_model_prepare (lilac.h) repacks every eligible matrix (rows a
 * multiple of 16, columns of 256, not the embedding) when the model runs
 * on the CPU's fast path with a kernel set that has the 16-row kernels,
 * unless params.no_repack. */
void lilac_model_repack_free(lilac_model *m);
/* false when LILAC_REPACK is 0, off or no: the default of params.no_repack */
bool lilac_repack_enabled_env(void);

#endif
