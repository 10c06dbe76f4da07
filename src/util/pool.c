/* pool: a persistent pool whose workers spin briefly on a generation
 * counter before sleeping. A decode step of a large MoE runs a thousand or
 * more short parallel jobs; waking threads through a condition variable
 * for each would cost more than the work, so a new job is published with
 * one atomic increment and seen within nanoseconds by spinning workers.
 * Workers idle for longer than the spin window sleep on a condition
 * variable and are woken only when they do. */
#include "util/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void cpu_relax(void) { __asm__ __volatile__("yield"); }
#else
static inline void cpu_relax(void) {}
#endif

/* Waiting: pauses first (a job usually comes within microseconds), then
 * yields, so that on a machine with more runnable threads than cores the
 * thread being waited for gets the core; after SPIN_LIMIT rounds a worker
 * sleeps. */
#define PAUSE_ROUNDS 1024
#define SPIN_LIMIT (1 << 14)

static inline void backoff(int spins)
{
    if (spins < PAUSE_ROUNDS)
        cpu_relax();
    else
        sched_yield();
}

struct lilac_pool {
    int n_threads;
    pthread_t *threads; /* n_threads - 1 workers */

    /* the job in flight; written before gen is bumped, read after */
    lilac_pool_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next;    /* next task to take */
    atomic_int pending; /* workers not yet done with this job */
    atomic_uint gen;    /* bumped to publish a job */
    atomic_bool quit;

    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_int sleepers;
};

typedef struct {
    lilac_pool *p;
    int id;
} worker_arg;

static void take_tasks(lilac_pool *p, lilac_pool_fn fn, void *ctx, int n, int thread)
{
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n)
            break;
        fn(ctx, t, thread);
    }
}

static void wait_for_job(lilac_pool *p, unsigned seen)
{
    for (int spins = 0; atomic_load(&p->gen) == seen && !atomic_load(&p->quit);) {
        if (++spins < SPIN_LIMIT) {
            backoff(spins);
            continue;
        }
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->sleepers, 1);
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
            pthread_cond_wait(&p->wake, &p->mu);
        atomic_fetch_sub(&p->sleepers, 1);
        pthread_mutex_unlock(&p->mu);
        spins = 0;
    }
}

static void *worker_main(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    lilac_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        wait_for_job(p, seen);
        if (atomic_load(&p->quit))
            break;
        seen = atomic_load(&p->gen);
        take_tasks(p, p->fn, p->ctx, p->n_tasks, wa.id);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
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
    atomic_store(&p->quit, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; p->threads && i < p->n_threads - 1; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
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
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    /* seq_cst: a worker going to sleep either sees the new generation or
     * is counted in sleepers here */
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    take_tasks(p, fn, ctx, n_tasks, 0);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++)
        backoff(spins);
}
