/* repack: the Q4_K / Q6_K matrices in the CPU's 16-row interleaved layout
 * (kernels/cpu/qr16.h), made once at load.
 *
 * The repacked copy lives in one anonymous mapping owned by the model; the
 * file's pages of what was copied are dropped from this process (they stay
 * in the page cache for the next load). A repacked matrix has the sizes
 * and group offsets of the original, so each lilac_mat (an expert's view
 * into a stack included) just points at the same offset in the copy. */
#define _DEFAULT_SOURCE /* madvise, MAP_ANONYMOUS */
#include "model/repack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "format/dtype.h"
#include "util/err.h"

typedef struct {
    lilac_mat **mats;
    size_t n, cap;
    uint64_t bytes;
} mat_list;

typedef struct {
    lilac_mat **mats;
    uint8_t **dst;
} pack_job;

static bool eligible(const lilac_model *m, const lilac_mat *W)
{
    int t = lilac_cpu_r16_type(W->type);
    /* the embedding is read by rows (and a tied output shares it) */
    return t >= 0 && lilac_cpu_qr16_for(m->kern, t) && W->rows > 0 && W->rows % LILAC_QR16_ROWS == 0 &&
           W->cols % 256 == 0 && W->data != m->w.tok_embd.data &&
           W->row_bytes == lilac_dtype_row_bytes(W->type, W->cols);
}

static bool add(mat_list *l, const lilac_model *m, lilac_mat *W)
{
    if (!eligible(m, W))
        return true;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        lilac_mat **p = realloc(l->mats, cap * sizeof *p);
        if (!p)
            return false;
        l->mats = p;
        l->cap = cap;
    }
    l->mats[l->n++] = W;
    l->bytes += (uint64_t)W->rows * W->row_bytes;
    return true;
}

static bool collect(lilac_model *m, mat_list *l)
{
    const lilac_hparams *hp = &m->hp;
    bool ok = add(l, m, &m->w.output);
    for (int il = 0; il < hp->n_layer && ok; il++) {
        lilac_layer_weights *lw = &m->w.layers[il];
        lilac_mat *one[] = {&lw->wq,        &lw->wk,        &lw->wv,      &lw->wo,      &lw->ssm_qkv,
                            &lw->ssm_z,     &lw->ssm_alpha, &lw->ssm_beta, &lw->ssm_out, &lw->router,
                            &lw->sh_gate,   &lw->sh_up,     &lw->sh_down};
        for (size_t i = 0; i < sizeof one / sizeof one[0] && ok; i++)
            ok = add(l, m, one[i]);
        for (int e = 0; lw->exp_gate && e < hp->n_expert && ok; e++)
            ok = add(l, m, &lw->exp_gate[e]) && add(l, m, &lw->exp_up[e]) && add(l, m, &lw->exp_down[e]);
    }
    return ok;
}

static void pack_task(void *ctx, int task, int thread)
{
    (void)thread;
    const pack_job *j = ctx;
    const lilac_mat *W = j->mats[task];
    size_t group = LILAC_QR16_ROWS * W->row_bytes;
    for (int64_t g = 0; g < W->rows / LILAC_QR16_ROWS; g++) {
        const uint8_t *src = (const uint8_t *)W->data + (size_t)g * group;
        if (W->type == LILAC_Q4_K)
            lilac_qr16_pack_q4_K(src, W->row_bytes, W->cols, j->dst[task] + (size_t)g * group);
        else
            lilac_qr16_pack_q6_K(src, W->row_bytes, W->cols, j->dst[task] + (size_t)g * group);
    }
    /* the file's pages of this matrix leave the process (whole pages
     * inside it only: its neighbours may not be repacked) */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)W->data + page - 1) & ~(page - 1);
    uintptr_t b = ((uintptr_t)W->data + (size_t)W->rows * W->row_bytes) & ~(page - 1);
    if (b > a)
        madvise((void *)a, b - a, MADV_DONTNEED);
}

bool lilac_repack_enabled_env(void)
{
    const char *e = getenv("LILAC_REPACK");
    return !(e && (!strcmp(e, "0") || !strcmp(e, "off") || !strcmp(e, "no")));
}

static lilac_status repack(lilac_model *m, lilac_error *err)
{
    if (m->cuda || !m->kern->fast || !m->kern->qx_quantize || m->params.no_repack)
        return LILAC_OK;
    mat_list l = {0};
    if (!collect(m, &l)) {
        free(l.mats);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    }
    if (!l.n) {
        free(l.mats);
        return LILAC_OK;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* one mapping: page-aligned, huge pages where the kernel gives them
     * (fewer TLB misses when the kernels stream it) */
    size_t bytes = (size_t)l.bytes;
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        free(l.mats);
        return lilac_fail(err, LILAC_E_NOMEM,
                          "cannot allocate %.2f GiB to repack the Q4_K/Q6_K weights for the CPU kernels "
                          "(LILAC_REPACK=0 keeps them as mapped from the file, slower)",
                          (double)bytes / (1u << 30));
    }
#ifdef MADV_HUGEPAGE
    madvise(mem, bytes, MADV_HUGEPAGE);
#endif
    uint8_t **dst = malloc(l.n * sizeof *dst);
    if (!dst) {
        munmap(mem, bytes);
        free(l.mats);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    }
    size_t off = 0;
    for (size_t i = 0; i < l.n; i++) {
        dst[i] = (uint8_t *)mem + off;
        off += (size_t)l.mats[i]->rows * l.mats[i]->row_bytes;
    }
    pack_job j = {l.mats, dst};
    lilac_pool_run(m->pool, (int)l.n, pack_task, &j); /* one task per matrix: as many as the model's views */
    for (size_t i = 0; i < l.n; i++) {
        l.mats[i]->data = dst[i];
        l.mats[i]->type = lilac_cpu_r16_type(l.mats[i]->type);
    }
    m->repack_mem = mem;
    m->repack_bytes = bytes;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    lilac_model_log(m, LILAC_LOG_INFO, "repacked %zu Q4_K/Q6_K matrices (%.2f GiB) for the CPU kernels in %.2f s", l.n,
                    (double)bytes / (1u << 30), (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    free(dst);
    free(l.mats);
    return LILAC_OK;
}

/* one lock for every model: preparing is rare, and a model's first two
 * sequences may be made at once */
static pthread_mutex_t prepare_mu = PTHREAD_MUTEX_INITIALIZER;

lilac_status lilac_model_prepare(lilac_model *m, lilac_error *err)
{
    pthread_mutex_lock(&prepare_mu);
    lilac_status s = LILAC_OK;
    if (!m->prepared) {
        s = repack(m, err);
        m->prepared = s == LILAC_OK;
    }
    pthread_mutex_unlock(&prepare_mu);
    return s;
}

uint64_t lilac_model_repacked_bytes(const lilac_model *m) { return m->repack_bytes; }

void lilac_model_repack_free(lilac_model *m)
{
    if (m->repack_mem)
        munmap(m->repack_mem, m->repack_bytes);
    m->repack_mem = NULL;
    m->repack_bytes = 0;
}
