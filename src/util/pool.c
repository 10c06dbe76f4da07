#include "util/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

struct lilac_pool {
    int n_threads;
    pthread_t *threads; /* n_threads - 1 workers */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    /* the job in flight; a new generation number announces it */
    lilac_pool_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next;     /* next task to take */
    int busy;            /* workers still on the current job */
    unsigned long generation;
    bool quit;
};

typedef struct {
    lilac_pool *p;
    int id;
} worker_arg;

static void take_tasks(lilac_pool *p, lilac_pool_fn fn, void *ctx, int n, int thread)
{
    for (;;) {
        int t = atomic_fetch_add(&p->next, 1);
        if (t >= n)
            break;
        fn(ctx, t, thread);
    }
}

static void *worker_main(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    lilac_pool *p = wa.p;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        lilac_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        int n = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        take_tasks(p, fn, ctx, n, wa.id);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

lilac_status lilac_pool_new(int n_threads, lilac_pool **out, lilac_error *err)
{
    *out = NULL;
    if (n_threads < 1)
        n_threads = 1;
    lilac_pool *p = calloc(1, sizeof *p);
    if (!p)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory for the thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            lilac_pool_free(p);
            return lilac_fail(err, LILAC_E_NOMEM, "out of memory for the thread pool");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa)
                *wa = (worker_arg){p, i + 1};
            if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
                free(wa);
                p->n_threads = i + 1; /* only join those started */
                lilac_pool_free(p);
                return lilac_fail(err, LILAC_E_INTERNAL, "cannot start worker thread %d", i + 1);
            }
        }
    }
    *out = p;
    return LILAC_OK;
}

void lilac_pool_free(lilac_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; p->threads && i < p->n_threads - 1; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int lilac_pool_size(const lilac_pool *p) { return p ? p->n_threads : 1; }

void lilac_pool_run(lilac_pool *p, int n_tasks, lilac_pool_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->busy = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    take_tasks(p, fn, ctx, n_tasks, 0);

    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
