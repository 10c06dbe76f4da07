/* pool: a persistent pool of worker threads. lilac_pool_run splits n_tasks
 * over the workers and the calling thread and returns when all are done. */
#ifndef LILAC_UTIL_POOL_H
#define LILAC_UTIL_POOL_H

#include "lilac.h"

typedef struct lilac_pool lilac_pool;

/* fn(ctx, task, thread): task in [0, n_tasks), thread in [0, n_threads). */
typedef void (*lilac_pool_fn)(void *ctx, int task, int thread);

/* n_threads counts the caller: 1 means no extra threads. */
lilac_status lilac_pool_new(int n_threads, lilac_pool **out, lilac_error *err);
void lilac_pool_free(lilac_pool *p);
int lilac_pool_size(const lilac_pool *p);
void lilac_pool_run(lilac_pool *p, int n_tasks, lilac_pool_fn fn, void *ctx);

#endif
