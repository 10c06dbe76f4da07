/* attention: see attention.h. */
#include "model/attention.h"

#include <string.h>

#include "lilac.h"

size_t lilac_attn_part_floats(int n_head, int n_head_kv, int head_dim)
{
    size_t g = (size_t)(n_head / n_head_kv);
    return g * (size_t)head_dim + 2 * g;
}

size_t lilac_attn_thread_floats(int n_head, int n_head_kv, int head_dim)
{
    return 2 * lilac_attn_part_floats(n_head, n_head_kv, head_dim);
}

/* 512 keys per range (a fold per 512 keys costs ~1/1000 of the range),
 * doubled until a token has at most 64 ranges. */
int lilac_attn_chunk(int n)
{
    int c = 512;
    while ((n + c - 1) / c > 64)
        c *= 2;
    return c;
}

typedef struct {
    const lilac_attn_step *a;
    int g;
    size_t part; /* floats of a partial state */
    /* split mode: row r's ranges are parts [first[r], first[r + 1]) */
    int first[LILAC_ATTN_SPLIT_ROWS + 1];
} attn_job;

/* A partial state's pieces: o [g][hd], then m [g], then l [g]. */
static inline float *st_m(float *p, int g, int hd) { return p + (size_t)g * hd; }
static inline float *st_l(float *p, int g, int hd) { return p + (size_t)g * hd + g; }

/* The state of row (token t, KV head kvh) over keys [j0, j0 + n), the
 * query heads in slices the kernel takes. */
static void range(const attn_job *j, int t, int kvh, int j0, int n, float *dst)
{
    const lilac_attn_step *a = j->a;
    int g = j->g, hd = a->head_dim;
    size_t es = a->kv_type == LILAC_KV_F16 ? 2 : 4;
    int64_t stride = (int64_t)a->n_head_kv * hd;
    size_t off = ((size_t)j0 * (size_t)stride + (size_t)kvh * hd) * es;
    lilac_attn_fn fn = a->kv_type == LILAC_KV_F16 ? a->kern->attn_f16 : a->kern->attn_f32;
    for (int i0 = 0; i0 < g; i0 += LILAC_ATTN_MAX_G) {
        int gs = g - i0 < LILAC_ATTN_MAX_G ? g - i0 : LILAC_ATTN_MAX_G;
        lilac_attn_in in = {
            .q = a->q + (size_t)t * a->q_stride + (size_t)(kvh * g + i0) * a->q_step,
            .q_step = a->q_step,
            .g = gs,
            .hd = hd,
            .k = (const char *)a->kv[2 * t] + off,
            .v = (const char *)a->kv[2 * t + 1] + off,
            .stride = stride,
            .n = n,
            .scale = 1.0f / sqrtf((float)hd),
        };
        fn(&in, dst + (size_t)i0 * hd, st_m(dst, g, hd) + i0, st_l(dst, g, hd) + i0);
    }
}

/* out = o / l for the row's heads */
static void finish(const attn_job *j, int t, int kvh, float *st)
{
    const lilac_attn_step *a = j->a;
    int g = j->g, hd = a->head_dim;
    const float *l = st_l(st, g, hd);
    for (int i = 0; i < g; i++) {
        float inv = 1.0f / l[i], *o = a->out + (size_t)t * a->n_head * hd + (size_t)(kvh * g + i) * hd;
        const float *s = st + (size_t)i * hd;
        for (int d = 0; d < hd; d++)
            o[d] = s[d] * inv;
    }
}

/* One row, its ranges folded in order as they are computed. */
static void row_task(void *ctx, int task, int thread)
{
    const attn_job *j = ctx;
    const lilac_attn_step *a = j->a;
    int g = j->g, hd = a->head_dim, t = task / a->n_head_kv, kvh = task % a->n_head_kv;
    float *acc = a->per_thread + (size_t)thread * a->per_thread_floats, *tmp = acc + j->part;
    int n = a->pos[t] + 1, ch = lilac_attn_chunk(n);
    for (int j0 = 0; j0 < n; j0 += ch) {
        int len = n - j0 < ch ? n - j0 : ch;
        if (j0 == 0) {
            range(j, t, kvh, j0, len, acc);
        } else {
            range(j, t, kvh, j0, len, tmp);
            lilac_attn_merge(acc, st_m(acc, g, hd), st_l(acc, g, hd), tmp, st_m(tmp, g, hd), st_l(tmp, g, hd), g, hd);
        }
    }
    finish(j, t, kvh, acc);
}

/* One range of one row into its own part (split mode). */
static void part_task(void *ctx, int task, int thread)
{
    (void)thread;
    const attn_job *j = ctx;
    const lilac_attn_step *a = j->a;
    int r = 0;
    while (task >= j->first[r + 1])
        r++;
    int t = r / a->n_head_kv, kvh = r % a->n_head_kv;
    int n = a->pos[t] + 1, ch = lilac_attn_chunk(n), j0 = (task - j->first[r]) * ch;
    range(j, t, kvh, j0, n - j0 < ch ? n - j0 : ch, a->parts + (size_t)task * j->part);
}

void lilac_attn_run(lilac_pool *pool, const lilac_attn_step *a)
{
    attn_job j = {.a = a, .g = a->n_head / a->n_head_kv};
    j.part = lilac_attn_part_floats(a->n_head, a->n_head_kv, a->head_dim);
    int rows = a->nt * a->n_head_kv, g = j.g, hd = a->head_dim;
    /* Split when there are fewer rows than would keep the threads busy and
     * their ranges fit the parts. */
    bool split = rows < 2 * (pool ? lilac_pool_size(pool) : 1) && rows <= LILAC_ATTN_SPLIT_ROWS;
    if (split) {
        j.first[0] = 0;
        for (int r = 0; r < rows; r++) {
            int n = a->pos[r / a->n_head_kv] + 1, ch = lilac_attn_chunk(n);
            j.first[r + 1] = j.first[r] + (n + ch - 1) / ch;
        }
        split = j.first[rows] > rows && j.first[rows] <= a->n_parts;
    }
    if (!split) {
        lilac_pool_run(pool, rows, row_task, &j);
        return;
    }
    lilac_pool_run(pool, j.first[rows], part_task, &j);
    for (int r = 0; r < rows; r++) {
        float *acc = a->parts + (size_t)j.first[r] * j.part;
        for (int p = j.first[r] + 1; p < j.first[r + 1]; p++) {
            float *s = a->parts + (size_t)p * j.part;
            lilac_attn_merge(acc, st_m(acc, g, hd), st_l(acc, g, hd), s, st_m(s, g, hd), st_l(s, g, hd), g, hd);
        }
        finish(&j, r / a->n_head_kv, r % a->n_head_kv, acc);
    }
}
