/* plan: the memory plans (engine/plan.c) beyond the public ones. */
#ifndef LILAC_ENGINE_PLAN_H
#define LILAC_ENGINE_PLAN_H

#include <stdint.h>

#include "lilac.h"

/* lilac_model_gpu_mem_report's numbers against a given budget (no device
 * looked at: have_device false): fits and max_ctx as it finds them. For
 * tests, and for the report itself once it knows the budget. */
lilac_mem_report lilac_model_gpu_mem_report_budget(const lilac_model *m, int n_ctx, int n_parallel, uint64_t budget);

#endif
