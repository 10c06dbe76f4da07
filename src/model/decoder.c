/* decoder: the forward pass shared by the MoE decoders lilac runs, written
 * to read as the math. Per layer: x += mixer(norm(x)); x += moe(norm(x)),
 * where the mixer is gated full attention or Gated DeltaNet as the layer
 * pattern says. Everything is computed in float32 over the weights as
 * stored (see docs/ for the reference it follows). */
#include <math.h>
#include <string.h>

#include "engine/seq.h"
#include "kernels/cpu/quantize.h"
#include "model/attention.h"
#include "model/decoder_cuda.h"
#include "model/deltanet.h"
#include "util/err.h"

/* ---- small vector helpers ---- */

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static float dotf(const float *a, const float *b, int n)
{
    float s = 0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* y = x / sqrt(mean(x^2) + eps) * w  (w NULL: no scale) */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        y[i] = x[i] * r * (w ? w[i] : 1.0f);
}

/* x / sqrt(sum(x^2) + 1e-6), as the reference's l2norm */
static void l2norm(float *x, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss + 1e-6));
    for (int i = 0; i < n; i++)
        x[i] *= r;
}

/* Rotate-half (NeoX) rotary embedding on the first `rot` dims of a head:
 * dim i pairs with i + rot/2; frequencies computed in float32 as the
 * reference does. */
static void rope(float *x, int rot, int pos, float theta)
{
    int half = rot / 2;
    for (int i = 0; i < half; i++) {
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)rot);
        float ang = (float)pos * inv_freq;
        float c = cosf(ang), s = sinf(ang);
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
    }
}

static void matmul(const lilac_model *m, const lilac_mat *W, const float *x, int n, float *y)
{
    lilac_matmul(m->kern, m->pool, W, x, n, y);
}

/* ---- gated full attention ---- */

static void attention(const lilac_model *m, const lilac_layer_weights *lw, int il, const lilac_dec_seg *segs,
                      lilac_scratch *sc, int nt, float *out)
{
    const lilac_hparams *hp = &m->hp;
    int hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv, kvw = nkv * hd;
    int q_step = hd * (hp->attn_output_gate ? 2 : 1), q_stride = nh * q_step;
    float *qg = sc->big0, *k = sc->big1, *v = sc->big2;
    lilac_mm_item qkv[3] = {{&lw->wq, sc->xn, qg, 0}, {&lw->wk, sc->xn, k, 0}, {&lw->wv, sc->xn, v, 0}};
    lilac_matmul_multi(m->kern, m->pool, qkv, 3, nt);
    for (int t = 0; t < nt; t++) {
        int pos = sc->tok_pos[t];
        lilac_layer_state *st = &segs[sc->tok_seg[t]].s->layers[il];
        for (int h = 0; h < nh; h++) {
            float *q = qg + (size_t)t * q_stride + (size_t)h * q_step;
            rmsnorm(q, q, lw->q_norm, hd, hp->norm_eps);
            rope(q, hp->rope_dims, pos, hp->rope_theta);
        }
        for (int h = 0; h < nkv; h++) {
            float *kh = k + (size_t)t * kvw + (size_t)h * hd;
            rmsnorm(kh, kh, lw->k_norm, hd, hp->norm_eps);
            rope(kh, hp->rope_dims, pos, hp->rope_theta);
        }
        if (m->params.kv_type == LILAC_KV_F16) {
            uint16_t *kd = (uint16_t *)st->k + (size_t)pos * kvw, *vd = (uint16_t *)st->v + (size_t)pos * kvw;
            for (int i = 0; i < kvw; i++) {
                kd[i] = lilac_f32_to_f16(k[(size_t)t * kvw + i]);
                vd[i] = lilac_f32_to_f16(v[(size_t)t * kvw + i]);
            }
        } else {
            memcpy((float *)st->k + (size_t)pos * kvw, k + (size_t)t * kvw, (size_t)kvw * sizeof(float));
            memcpy((float *)st->v + (size_t)pos * kvw, v + (size_t)t * kvw, (size_t)kvw * sizeof(float));
        }
        sc->attn_kv[2 * t] = st->k;
        sc->attn_kv[2 * t + 1] = st->v;
    }
    float *o = sc->big1; /* k and v now live in the cache */
    lilac_attn_step as = {
        .kern = m->kern,
        .n_head = nh,
        .n_head_kv = nkv,
        .head_dim = hd,
        .kv_type = m->params.kv_type,
        .nt = nt,
        .q = qg,
        .q_stride = q_stride,
        .q_step = q_step,
        .kv = sc->attn_kv,
        .pos = sc->tok_pos,
        .out = o,
        .per_thread = sc->per_thread,
        .per_thread_floats = sc->per_thread_floats,
        .parts = sc->attn_parts,
        .n_parts = sc->attn_n_parts,
    };
    lilac_attn_run(m->pool, &as);
    if (hp->attn_output_gate)
        for (int t = 0; t < nt; t++)
            for (int h = 0; h < nh; h++) {
                const float *g = qg + (size_t)t * q_stride + (size_t)h * q_step + hd;
                float *oh = o + (size_t)t * nh * hd + (size_t)h * hd;
                for (int d = 0; d < hd; d++)
                    oh[d] *= sigmoid(g[d]);
            }
    matmul(m, &lw->wo, o, nt, out);
}

/* ---- Gated DeltaNet ---- */

typedef struct {
    const lilac_model *m;
    const lilac_dec_seg *segs;
    int il;
    lilac_scratch *sc;
    const float *qkv; /* [nt][conv channels], after conv, SiLU and q/k L2 norm */
    const float *g, *beta; /* [nt][v_heads] */
    float *o;              /* [nt][v_heads * v_dim] */
} dn_job;

/* task: value head j of segment task / v_heads */
static void dn_head_task(void *ctx, int task, int thread)
{
    const dn_job *jb = ctx;
    const lilac_dec_seg *seg = &jb->segs[task / jb->m->hp.ssm_v_heads];
    int j = task % jb->m->hp.ssm_v_heads;
    const lilac_hparams *hp = &jb->m->hp;
    int nk = hp->ssm_k_heads, nv = hp->ssm_v_heads, dk = hp->ssm_k_dim, dv = hp->ssm_v_dim;
    int C = 2 * nk * dk + nv * dv;
    int kh = jb->m->w.ssm_v_tiled ? j % nk : j / (nv / nk);
    float *S = seg->s->layers[jb->il].ssm + (size_t)j * dk * dv;
    float *buf = jb->sc->per_thread + (size_t)thread * jb->sc->per_thread_floats;
    const float *row0 = jb->qkv + (size_t)seg->t0 * C;
    const float *q = row0 + (size_t)kh * dk, *k = row0 + (size_t)nk * dk + (size_t)kh * dk;
    const float *v = row0 + (size_t)2 * nk * dk + (size_t)j * dv;
    float *o = jb->o + (size_t)seg->t0 * nv * dv + (size_t)j * dv;
    float gs[LILAC_DN_CHUNK], bs[LILAC_DN_CHUNK];
    for (int t = 0; t < seg->n; t += LILAC_DN_CHUNK) {
        int L = seg->n - t < LILAC_DN_CHUNK ? seg->n - t : LILAC_DN_CHUNK;
        for (int i = 0; i < L; i++) {
            gs[i] = jb->g[(size_t)(seg->t0 + t + i) * nv + j];
            bs[i] = jb->beta[(size_t)(seg->t0 + t + i) * nv + j];
        }
        size_t x = (size_t)t * C, y = (size_t)t * nv * dv;
        if (seg->n == 1)
            lilac_dn_recurrent(S, q, k, v, gs[0], bs[0], dk, dv, o, buf);
        else
            lilac_dn_chunk(jb->m->kern, S, q + x, k + x, v + x, C, gs, bs, L, dk, dv, o + y, (int64_t)nv * dv, buf);
    }
}

/* n items of work over the pool, about 4 tasks per thread, task k taking
 * items [k * *per_task, (k + 1) * *per_task); one task inline below min_n
 * items (a barrier costs more than a few of them) */
static void split_run(const lilac_model *m, int n, int min_n, int *per_task, lilac_pool_fn fn, void *ctx)
{
    int threads = lilac_pool_size(m->pool);
    if (n < min_n || threads < 2) {
        *per_task = n > 0 ? n : 1;
        fn(ctx, 0, 0);
        return;
    }
    int tasks = threads * 4 < n ? threads * 4 : n;
    *per_task = (n + tasks - 1) / tasks;
    lilac_pool_run(m->pool, (n + *per_task - 1) / *per_task, fn, ctx);
}

/* Per-token work of a DeltaNet layer, split over the pool by tokens when
 * there are enough of them to pay for a barrier (each token's arithmetic
 * is the same either way). */
typedef struct {
    const lilac_model *m;
    const lilac_layer_weights *lw;
    int il;
    const lilac_dec_seg *segs;
    const lilac_scratch *sc;
    const float *qkv; /* [nt][C] the projection */
    float *conv;      /* [nt][C] after conv and SiLU */
    float *a, *b;     /* [nt][v_heads] the gates, in place */
    float *o;         /* [nt][v_heads * v_dim] the heads' outputs, gated in place */
    const float *z;
    int nt, per_task;
} dn_tok_job;

typedef void (*tok_fn)(const dn_tok_job *j, int t);

typedef struct {
    dn_tok_job *j;
    tok_fn fn;
} tok_run;

static void tok_task(void *ctx, int task, int thread)
{
    (void)thread;
    const tok_run *r = ctx;
    int t1 = (task + 1) * r->j->per_task < r->j->nt ? (task + 1) * r->j->per_task : r->j->nt;
    for (int t = task * r->j->per_task; t < t1; t++)
        r->fn(r->j, t);
}

static void tok_parallel(const lilac_model *m, int nt, tok_fn fn, dn_tok_job *j)
{
    tok_run r = {j, fn};
    split_run(m, nt, 8, &j->per_task, tok_task, &r);
}

static void dn_conv_task(const dn_tok_job *j, int t)
{
    const lilac_hparams *hp = &j->m->hp;
    int nk = hp->ssm_k_heads, nv = hp->ssm_v_heads, dk = hp->ssm_k_dim;
    int C = 2 * nk * dk + nv * hp->ssm_v_dim, K = hp->ssm_conv_kernel;
    const lilac_dec_seg *seg = &j->segs[j->sc->tok_seg[t]];
    const lilac_layer_state *st = &seg->s->layers[j->il];
    const float *in = j->qkv + (size_t)seg->t0 * C;
    int ts = t - seg->t0; /* within its segment */
    float *row = j->conv + (size_t)t * C;
    for (int c = 0; c < C; c++) {
        const float *w = j->lw->ssm_conv + (size_t)c * K;
        float s = 0;
        for (int i = 0; i < K; i++) {
            int tau = ts - (K - 1) + i;
            float xin = tau >= 0 ? in[(size_t)tau * C + c] : st->conv[(size_t)(K - 1 + tau) * C + c];
            s += w[i] * xin;
        }
        row[c] = silu(s);
    }
    float qscale = 1.0f / sqrtf((float)dk);
    for (int h = 0; h < nk; h++) {
        float *q = row + (size_t)h * dk, *k = row + (size_t)(nk + h) * dk;
        l2norm(q, dk);
        l2norm(k, dk);
        for (int d = 0; d < dk; d++)
            q[d] *= qscale;
    }
    for (int jv = 0; jv < nv; jv++) {
        size_t i = (size_t)t * nv + jv;
        j->a[i] = j->lw->ssm_a[jv] * softplus(j->a[i] + j->lw->ssm_dt[jv]); /* g, the log-decay */
        j->b[i] = sigmoid(j->b[i]);
    }
}

static void dn_gate_task(const dn_tok_job *j, int t)
{
    const lilac_hparams *hp = &j->m->hp;
    int nv = hp->ssm_v_heads, dv = hp->ssm_v_dim;
    for (int jv = 0; jv < nv; jv++) {
        float *oj = j->o + (size_t)t * nv * dv + (size_t)jv * dv;
        const float *zj = j->z + (size_t)t * nv * dv + (size_t)jv * dv;
        rmsnorm(oj, oj, j->lw->ssm_norm, dv, hp->norm_eps);
        for (int c = 0; c < dv; c++)
            oj[c] *= silu(zj[c]);
    }
}

static void deltanet(const lilac_model *m, const lilac_layer_weights *lw, int il, const lilac_dec_seg *segs,
                     int n_seg, lilac_scratch *sc, int nt, float *out)
{
    const lilac_hparams *hp = &m->hp;
    int nk = hp->ssm_k_heads, nv = hp->ssm_v_heads, dk = hp->ssm_k_dim, dv = hp->ssm_v_dim;
    int C = 2 * nk * dk + nv * dv, K = hp->ssm_conv_kernel;
    float *qkv = sc->big0, *z = sc->big1, *conv = sc->big2, *a = sc->small0, *b = sc->small1;
    lilac_mm_item proj[4] = {{&lw->ssm_qkv, sc->xn, qkv, 0}, {&lw->ssm_z, sc->xn, z, 0},
                             {&lw->ssm_alpha, sc->xn, a, 0}, {&lw->ssm_beta, sc->xn, b, 0}};
    lilac_matmul_multi(m->kern, m->pool, proj, 4, nt);

    /* causal depthwise conv (inputs before a segment come from its
     * state), SiLU, q/k L2 norm and the gates, per token over the pool;
     * then each state keeps its segment's last K-1 inputs */
    dn_tok_job tj = {m, lw, il, segs, sc, qkv, conv, a, b, NULL, NULL, nt, 0};
    tok_parallel(m, nt, dn_conv_task, &tj);
    for (int g = 0; g < n_seg; g++) {
        lilac_layer_state *st = &segs[g].s->layers[il];
        const float *in = qkv + (size_t)segs[g].t0 * C;
        int n = segs[g].n;
        for (int r = 0; r < K - 1; r++) {
            int tau = n - (K - 1) + r; /* input index relative to this segment */
            float *dst = st->conv + (size_t)r * C;
            if (tau >= 0)
                memcpy(dst, in + (size_t)tau * C, (size_t)C * sizeof(float));
            else
                memmove(dst, st->conv + (size_t)(K - 1 + tau) * C, (size_t)C * sizeof(float));
        }
    }
    float *o = sc->big0; /* the projections are consumed */
    dn_job jb = {m, segs, il, sc, conv, a, b, o};
    lilac_pool_run(m->pool, n_seg * nv, dn_head_task, &jb);
    /* gated RMSNorm per value head: norm(o) * w * silu(z) */
    tj.o = o;
    tj.z = z;
    tok_parallel(m, nt, dn_gate_task, &tj);
    matmul(m, &lw->ssm_out, o, nt, out);
}

/* ---- mixture of experts ---- */

static void route(const lilac_hparams *hp, float *logits, int *idx, float *w)
{
    int E = hp->n_expert, k = hp->n_expert_used;
    float mx = -INFINITY;
    for (int e = 0; e < E; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) {
        logits[e] = expf(logits[e] - mx);
        sum += logits[e];
    }
    for (int e = 0; e < E; e++)
        logits[e] = (float)(logits[e] / sum);
    /* top-k by selection; ties go to the lower index */
    double chosen = 0;
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int p = 0; p < i; p++)
                taken |= idx[p] == e;
            if (!taken && (best < 0 || logits[e] > logits[best]))
                best = e;
        }
        idx[i] = best;
        w[i] = logits[best];
        chosen += w[i];
    }
    if (hp->norm_topk)
        for (int i = 0; i < k; i++)
            w[i] = (float)(w[i] / chosen);
}

/* x += w * y: a weighted expert output into the residual update */
static void add_scaled(float *x, float w, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += w * y[i];
}

static void add(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

static void swiglu(float *g, const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g[i] = silu(g[i]) * u[i];
}

/* Few tokens (decode, one or several sequences): three jobs for the whole
 * layer — the router with the shared expert's gate and up; every selected
 * expert's gate and up over the rows routed to it; all downs — rather than
 * two per expert. The same products as the expert loop below, added in the
 * same order (experts by index, then the shared one), so the sums are
 * bitwise the same. Returns false when the rows do not fit its buffers. */
static bool moe_few(const lilac_model *m, const lilac_layer_weights *lw, lilac_scratch *sc, int nt, float *out)
{
    const lilac_hparams *hp = &m->hp;
    int E = hp->n_embd, k = hp->n_expert_used, ff = hp->expert_ff, sff = hp->shared_ff;
    bool shared = sff > 0;
    size_t R = (size_t)nt * k; /* routed rows */
    if (R + (size_t)nt > (size_t)sc->n_tok || R * ff + (size_t)nt * sff > sc->big_floats)
        return false;
    lilac_mm_item it[LILAC_MM_MAX];
    int n = 0;
    it[n++] = (lilac_mm_item){&lw->router, sc->xn, sc->small0, nt};
    float *sh_g = sc->big0 + R * ff, *sh_u = sc->big1 + R * ff;
    if (shared) {
        it[n++] = (lilac_mm_item){&lw->sh_gate, sc->xn, sh_g, nt};
        it[n++] = (lilac_mm_item){&lw->sh_up, sc->xn, sh_u, nt};
    }
    lilac_matmul_multi(m->kern, m->pool, it, n, nt);
    for (int t = 0; t < nt; t++)
        route(hp, sc->small0 + (size_t)t * hp->n_expert, sc->route_idx + (size_t)t * k, sc->route_w + (size_t)t * k);

    /* the rows of each expert, by expert index: group g holds rows [g0[g], g0[g] + gn[g]) */
    int g_exp[LILAC_MM_MAX], g0[LILAC_MM_MAX], gn[LILAC_MM_MAX], n_groups = 0;
    size_t r = 0;
    for (int e = 0; e < hp->n_expert; e++) {
        size_t first = r;
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < k; i++)
                if (sc->route_idx[t * k + i] == e) {
                    sc->ex_rows[r] = t;
                    sc->small1[r] = sc->route_w[t * k + i];
                    memcpy(sc->ex_in + r * E, sc->xn + (size_t)t * E, (size_t)E * sizeof(float));
                    r++;
                }
        if (r == first)
            continue;
        if (2 * n_groups + 3 > LILAC_MM_MAX)
            return false; /* nothing written to out yet: the caller's loop redoes it */
        g_exp[n_groups] = e;
        g0[n_groups] = (int)first;
        gn[n_groups++] = (int)(r - first);
    }
    n = 0;
    for (int g = 0; g < n_groups; g++) {
        int e = g_exp[g];
        /* a lone row straight from xn, so that the rows of one token quantize once */
        const float *x = gn[g] == 1 ? sc->xn + (size_t)sc->ex_rows[g0[g]] * E : sc->ex_in + (size_t)g0[g] * E;
        it[n++] = (lilac_mm_item){&lw->exp_gate[e], x, sc->big0 + (size_t)g0[g] * ff, gn[g]};
        it[n++] = (lilac_mm_item){&lw->exp_up[e], x, sc->big1 + (size_t)g0[g] * ff, gn[g]};
    }
    lilac_matmul_multi(m->kern, m->pool, it, n, nt);
    swiglu(sc->big0, sc->big1, R * ff);
    if (shared)
        swiglu(sh_g, sh_u, (size_t)nt * sff);
    n = 0;
    for (int g = 0; g < n_groups; g++)
        it[n++] = (lilac_mm_item){&lw->exp_down[g_exp[g]], sc->big0 + (size_t)g0[g] * ff,
                                  sc->ex_out + (size_t)g0[g] * E, gn[g]};
    float *sh_out = sc->ex_out + R * E;
    if (shared)
        it[n++] = (lilac_mm_item){&lw->sh_down, sh_g, sh_out, nt};
    lilac_matmul_multi(m->kern, m->pool, it, n, nt);
    memset(out, 0, (size_t)nt * E * sizeof(float));
    for (size_t i = 0; i < R; i++)
        add_scaled(out + (size_t)sc->ex_rows[i] * E, sc->small1[i], sc->ex_out + i * E, (size_t)E);
    if (shared)
        for (int t = 0; t < nt; t++)
            add_scaled(out + (size_t)t * E, sigmoid(dotf(lw->sh_gate_inp, sc->xn + (size_t)t * E, E)),
                       sh_out + (size_t)t * E, (size_t)E);
    return true;
}

/* The gather of an expert group's input rows and the combine of its
 * outputs, over the pool when there are many rows (prefill). The combine
 * splits by token and adds each token's rows in row order, the order of
 * the one-thread loop, so the sums are bitwise the same. */
typedef struct {
    lilac_scratch *sc;
    int E, r, nt, per_task;
    float *out;
} moe_rows_job;

static void moe_gather_task(void *ctx, int task, int thread)
{
    (void)thread;
    const moe_rows_job *j = ctx;
    int i1 = (task + 1) * j->per_task < j->r ? (task + 1) * j->per_task : j->r;
    for (int i = task * j->per_task; i < i1; i++)
        memcpy(j->sc->ex_in + (size_t)i * j->E, j->sc->xn + (size_t)j->sc->ex_rows[i] * j->E, (size_t)j->E * sizeof(float));
}

static void moe_combine_task(void *ctx, int task, int thread)
{
    (void)thread;
    const moe_rows_job *j = ctx;
    int t0 = task * j->per_task, t1 = t0 + j->per_task < j->nt ? t0 + j->per_task : j->nt;
    for (int i = 0; i < j->r; i++)
        if (j->sc->ex_rows[i] >= t0 && j->sc->ex_rows[i] < t1)
            add_scaled(j->out + (size_t)j->sc->ex_rows[i] * j->E, j->sc->small1[i], j->sc->ex_out + (size_t)i * j->E,
                       (size_t)j->E);
}


static void moe(const lilac_model *m, const lilac_layer_weights *lw, lilac_scratch *sc, int nt, float *out)
{
    const lilac_hparams *hp = &m->hp;
    int E = hp->n_embd, k = hp->n_expert_used, ff = hp->expert_ff;
    if (moe_few(m, lw, sc, nt, out))
        return;
    memset(out, 0, (size_t)nt * E * sizeof(float));
    matmul(m, &lw->router, sc->xn, nt, sc->small0);
    for (int t = 0; t < nt; t++)
        route(hp, sc->small0 + (size_t)t * hp->n_expert, sc->route_idx + (size_t)t * k, sc->route_w + (size_t)t * k);

    /* each expert over the tokens routed to it, weights read once per step;
     * experts in index order, as many at a time as the buffers hold, so
     * that a group's gates and ups are one job and its downs another (two
     * barriers per group rather than per expert). The products and the
     * order of the sums are the one-expert-at-a-time ones. */
    size_t cap_rows = (size_t)sc->n_tok, cap_ff = sc->big_floats / (size_t)ff;
    if (cap_ff < cap_rows)
        cap_rows = cap_ff;
    int e_next = 0;
    while (e_next < hp->n_expert) {
        int g_exp[LILAC_MM_MAX / 2], g0[LILAC_MM_MAX / 2], gn[LILAC_MM_MAX / 2], n_groups = 0;
        size_t r = 0;
        for (; e_next < hp->n_expert && n_groups < LILAC_MM_MAX / 2; e_next++) {
            int n = 0;
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < k; i++)
                    n += sc->route_idx[t * k + i] == e_next;
            if (!n)
                continue;
            if (r + (size_t)n > cap_rows)
                break; /* the next group starts with it (n <= nt <= cap_rows) */
            g_exp[n_groups] = e_next;
            g0[n_groups] = (int)r;
            gn[n_groups++] = n;
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < k; i++)
                    if (sc->route_idx[t * k + i] == e_next) {
                        sc->ex_rows[r] = t;
                        sc->small1[r] = sc->route_w[t * k + i];
                        r++;
                    }
        }
        moe_rows_job mr = {sc, E, (int)r, nt, 0, NULL};
        split_run(m, (int)r, 64, &mr.per_task, moe_gather_task, &mr);
        lilac_mm_item it[LILAC_MM_MAX];
        int n_it = 0;
        for (int g = 0; g < n_groups; g++) {
            const float *x = sc->ex_in + (size_t)g0[g] * E;
            it[n_it++] = (lilac_mm_item){&lw->exp_gate[g_exp[g]], x, sc->big0 + (size_t)g0[g] * ff, gn[g]};
            it[n_it++] = (lilac_mm_item){&lw->exp_up[g_exp[g]], x, sc->big1 + (size_t)g0[g] * ff, gn[g]};
        }
        lilac_matmul_multi(m->kern, m->pool, it, n_it, nt);
        swiglu(sc->big0, sc->big1, r * ff);
        n_it = 0;
        for (int g = 0; g < n_groups; g++)
            it[n_it++] = (lilac_mm_item){&lw->exp_down[g_exp[g]], sc->big0 + (size_t)g0[g] * ff,
                                         sc->ex_out + (size_t)g0[g] * E, gn[g]};
        lilac_matmul_multi(m->kern, m->pool, it, n_it, nt);
        mr.out = out;
        split_run(m, nt, 64, &mr.per_task, moe_combine_task, &mr);
    }
    if (hp->shared_ff > 0) {
        int sff = hp->shared_ff;
        const lilac_mm_item gu[2] = {{&lw->sh_gate, sc->xn, sc->big0, 0}, {&lw->sh_up, sc->xn, sc->big1, 0}};
        lilac_matmul_multi(m->kern, m->pool, gu, 2, nt);
        swiglu(sc->big0, sc->big1, (size_t)nt * sff);
        matmul(m, &lw->sh_down, sc->big0, nt, sc->ex_out);
        for (int t = 0; t < nt; t++)
            add_scaled(out + (size_t)t * E, sigmoid(dotf(lw->sh_gate_inp, sc->xn + (size_t)t * E, E)),
                       sc->ex_out + (size_t)t * E, (size_t)E);
    }
}

/* ---- the whole model ---- */


/* Where a step's outputs go: the residual stream and every row's logits
 * (one sequence, off/n_total placing the step in them), and the logits of
 * selected rows, one after another. */
typedef struct {
    float *hidden;
    float *logits_all;
    int off, n_total;
    const int *last_rows;
    int n_last;
    float *logits;
} step_out;

/* One step of nt <= sc->n_tok tokens over the segments' sequences. */
static void step(lilac_scratch *sc, const lilac_model *m, const lilac_dec_seg *segs, int n_seg, const int32_t *tokens,
                 int nt, const step_out *out)
{
    const lilac_hparams *hp = &m->hp;
    int E = hp->n_embd, L = hp->n_layer;
    size_t rowsz = (size_t)E * sizeof(float);
    for (int g = 0; g < n_seg; g++)
        for (int i = 0; i < segs[g].n; i++) {
            sc->tok_seg[segs[g].t0 + i] = g;
            sc->tok_pos[segs[g].t0 + i] = segs[g].s->pos + i;
        }
    for (int t = 0; t < nt; t++)
        lilac_mat_row_to_f32(&m->w.tok_embd, tokens[t], sc->x + (size_t)t * E); /* any type, MLX included */
    if (out->hidden)
        memcpy(out->hidden + (size_t)out->off * E, sc->x, nt * rowsz);

    for (int il = 0; il < L; il++) {
        const lilac_layer_weights *lw = &m->w.layers[il];
        for (int t = 0; t < nt; t++)
            rmsnorm(sc->xn + (size_t)t * E, sc->x + (size_t)t * E, lw->attn_norm, E, hp->norm_eps);
        if (hp->layer_kind[il] == LILAC_LAYER_ATTENTION)
            attention(m, lw, il, segs, sc, nt, sc->tmp);
        else
            deltanet(m, lw, il, segs, n_seg, sc, nt, sc->tmp);
        add(sc->x, sc->tmp, (size_t)nt * E);
        for (int t = 0; t < nt; t++)
            rmsnorm(sc->xn + (size_t)t * E, sc->x + (size_t)t * E, lw->post_norm, E, hp->norm_eps);
        moe(m, lw, sc, nt, sc->tmp);
        add(sc->x, sc->tmp, (size_t)nt * E);
        if (out->hidden && il < L - 1)
            memcpy(out->hidden + ((size_t)(il + 1) * out->n_total + out->off) * E, sc->x, nt * rowsz);
    }
    for (int t = 0; t < nt; t++)
        rmsnorm(sc->xn + (size_t)t * E, sc->x + (size_t)t * E, m->w.output_norm, E, hp->norm_eps);
    if (out->hidden)
        memcpy(out->hidden + ((size_t)L * out->n_total + out->off) * E, sc->xn, nt * rowsz);

    if (out->logits_all)
        matmul(m, &m->w.output, sc->xn, nt, out->logits_all + (size_t)out->off * hp->n_vocab);
    if (out->n_last > 0) {
        /* the rows side by side, so the output matrix is read once for all */
        const float *rows = sc->xn + (size_t)out->last_rows[0] * E;
        bool contiguous = true;
        for (int i = 1; i < out->n_last; i++)
            contiguous &= out->last_rows[i] == out->last_rows[0] + i;
        if (!contiguous) {
            for (int i = 0; i < out->n_last; i++)
                memcpy(sc->tmp + (size_t)i * E, sc->xn + (size_t)out->last_rows[i] * E, rowsz);
            rows = sc->tmp;
        }
        matmul(m, &m->w.output, rows, out->n_last, out->logits);
    }
    for (int g = 0; g < n_seg; g++)
        segs[g].s->pos += segs[g].n;
}

void lilac_decoder_step_multi(lilac_scratch *sc, const lilac_model *m, const lilac_dec_seg *segs, int n_seg,
                              const int32_t *tokens, const int *last_rows, int n_last, float *logits)
{
    int nt = 0;
    for (int g = 0; g < n_seg; g++)
        nt += segs[g].n;
    step_out out = {.last_rows = last_rows, .n_last = n_last, .logits = logits};
    step(sc, m, segs, n_seg, tokens, nt, &out);
}

lilac_status lilac_decoder_eval(lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                                lilac_error *err)
{
    if (s->cuda)
        return lilac_cuda_eval(s, tokens, n, opts, err);
    for (int off = 0; off < n; off += s->sc.n_tok) {
        int nt = n - off < s->sc.n_tok ? n - off : s->sc.n_tok;
        lilac_dec_seg seg = {s, 0, nt};
        int last = nt - 1;
        step_out out = {.hidden = opts->hidden, .off = off, .n_total = n};
        if (opts->logits_mode == LILAC_LOGITS_ALL)
            out.logits_all = opts->logits;
        else if (opts->logits_mode == LILAC_LOGITS_LAST && off + nt == n)
            out.last_rows = &last, out.n_last = 1, out.logits = opts->logits;
        step(&s->sc, s->m, &seg, 1, tokens + off, nt, &out);
    }
    return LILAC_OK;
}
