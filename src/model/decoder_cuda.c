/* decoder_cuda: the forward pass on the GPU (see decoder_cuda.h). It reads
 * as decoder.c does — per layer x += mixer(norm(x)); x += moe(norm(x)) —
 * with each step a CUDA kernel on one stream (kernels/cuda/cuda.h). */
#include "model/decoder_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/seq.h"
#include "format/dtype.h"
#include "model/cuda_mem.h"
#include "model/cuda_trace.h"
#include "model/model.h"
#include "kernels/cuda/cuda.h"
#include "util/err.h"
#include "util/env.h"

#ifdef LILAC_CUDA
#include "kernels/cuda/cuda_ops.h"
#include "model/decoder_cuda_int.h"

static void timing_report(void);

static lilac_status cuda_err(lilac_error *err, const char *what, const char *msg)
{
    return lilac_fail(err, LILAC_E_UNSUPPORTED, "%s: %s", what, msg);
}

lilac_status lilac_cuda_model_alloc(lilac_cuda_model *cm, void **p, size_t bytes, lilac_error *err)
{
    char msg[256];
    if (cm->n_allocs == cm->cap_allocs) {
        size_t cap = cm->cap_allocs ? 2 * cm->cap_allocs : 256;
        void **a = realloc(cm->allocs, cap * sizeof *a);
        if (!a)
            return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        cm->allocs = a, cm->cap_allocs = cap;
    }
    if (lilac_cuda_malloc(p, bytes ? bytes : 4, msg, sizeof msg))
        return cuda_err(err, "device memory", msg);
    cm->allocs[cm->n_allocs++] = *p;
    cm->bytes += bytes;
    return LILAC_OK;
}

static lilac_status up_floats(lilac_cuda_model *cm, const float *host, size_t n, float **out, lilac_error *err)
{
    *out = NULL;
    if (!host)
        return LILAC_OK;
    char msg[256];
    lilac_status st = lilac_cuda_model_alloc(cm, (void **)out, n * sizeof(float), err);
    if (!st && lilac_cuda_upload(*out, host, n * sizeof(float), msg, sizeof msg))
        st = cuda_err(err, "upload", msg);
    return st;
}

static lilac_status up_mat(lilac_cuda_model *cm, const lilac_mat *w, lilac_cuda_mat *out, lilac_error *err)
{
    memset(out, 0, sizeof *out);
    if (!w->data)
        return LILAC_OK;
    if (!lilac_cuda_type_supported(w->type)) {
        const lilac_dtype_info *di = lilac_dtype_get(w->type);
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "the CUDA kernels do not run %s weights yet",
                          di ? di->name : "MLX-quantized");
    }
    size_t bytes = (size_t)w->rows * w->row_bytes;
    void *d;
    char msg[256];
    lilac_status st = lilac_cuda_model_alloc(cm, &d, bytes, err);
    if (!st && lilac_cuda_upload(d, w->data, bytes, msg, sizeof msg))
        st = cuda_err(err, "upload", msg);
    if (!st)
        *out = (lilac_cuda_mat){d, w->type, w->rows, w->cols, w->row_bytes};
    return st;
}

/* ba bytes of a, then bb bytes of b, in one allocation of the model (*d). */
static lilac_status up_two(lilac_cuda_model *cm, const void *a, size_t ba, const void *b, size_t bb, uint8_t **d,
                           lilac_error *err)
{
    char msg[256];
    lilac_status st = lilac_cuda_model_alloc(cm, (void **)d, ba + bb, err);
    if (!st && (lilac_cuda_upload(*d, a, ba, msg, sizeof msg) || lilac_cuda_upload(*d + ba, b, bb, msg, sizeof msg)))
        st = cuda_err(err, "upload", msg);
    return st;
}

/* a and b, of the same type and row length, one after the other in one allocation (*joined: both, for one
 * product over the same input); otherwise apart (joined->data NULL). */
static lilac_status up_joined(lilac_cuda_model *cm, const lilac_mat *a, const lilac_mat *b, lilac_cuda_mat *oa,
                              lilac_cuda_mat *ob, lilac_cuda_mat *joined, lilac_error *err)
{
    memset(joined, 0, sizeof *joined);
    if (!a->data || !b->data || a->type != b->type || a->cols != b->cols || a->row_bytes != b->row_bytes ||
        !lilac_cuda_type_supported(a->type)) {
        lilac_status st = up_mat(cm, a, oa, err);
        return st ? st : up_mat(cm, b, ob, err);
    }
    const size_t ba = (size_t)a->rows * a->row_bytes, bb = (size_t)b->rows * b->row_bytes;
    uint8_t *d;
    lilac_status st = up_two(cm, a->data, ba, b->data, bb, &d, err);
    if (!st) {
        *oa = (lilac_cuda_mat){d, a->type, a->rows, a->cols, a->row_bytes};
        *ob = (lilac_cuda_mat){d + ba, b->type, b->rows, b->cols, b->row_bytes};
        *joined = (lilac_cuda_mat){d, a->type, a->rows + b->rows, a->cols, a->row_bytes};
    }
    return st;
}

/* The router, and where the model has a shared expert with an F32 router, its gate_inp (E floats) as one more
 * row: the norm+router kernel computes the shared gate's dot with the router's (*gate_row set). out keeps the
 * router's own rows, for the other paths. */
static lilac_status up_router(lilac_cuda_model *cm, const lilac_mat *w, const float *gate_inp, lilac_cuda_mat *out,
                              bool *gate_row, lilac_error *err)
{
    *gate_row = false;
    if (!gate_inp || w->type != LILAC_F32 || !w->data || w->row_bytes != (size_t)w->cols * sizeof(float))
        return up_mat(cm, w, out, err);
    uint8_t *d;
    lilac_status st = up_two(cm, w->data, (size_t)w->rows * w->row_bytes, gate_inp, w->row_bytes, &d, err);
    if (!st)
        *out = (lilac_cuda_mat){d, w->type, w->rows, w->cols, w->row_bytes}, *gate_row = true;
    return st;
}

/* The n experts one after another at d, whatever their host layout. */
static lilac_status up_expert_run(uint8_t *d, const lilac_mat *e, int n, size_t one, lilac_error *err)
{
    char msg[256];
    bool contiguous = true;
    for (int i = 1; i < n; i++)
        contiguous &= (const uint8_t *)e[i].data == (const uint8_t *)e[0].data + (size_t)i * one;
    if (contiguous && lilac_cuda_upload(d, e[0].data, one * (size_t)n, msg, sizeof msg))
        return cuda_err(err, "upload", msg);
    for (int i = 0; !contiguous && i < n; i++)
        if (lilac_cuda_upload(d + (size_t)i * one, e[i].data, one, msg, sizeof msg))
            return cuda_err(err, "upload", msg);
    return LILAC_OK;
}

/* The n experts of e (and of e2, when given, right after them: one
 * allocation, so that one product over expert indices < 2n covers both). */
static lilac_status up_experts(lilac_cuda_model *cm, const lilac_mat *e, const lilac_mat *e2, int n,
                               lilac_cuda_mat *out, lilac_cuda_mat *out2, size_t *stride, lilac_error *err)
{
    memset(out, 0, sizeof *out);
    if (!e || n < 1 || !e[0].data)
        return LILAC_OK;
    if (!lilac_cuda_type_supported(e[0].type))
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "the CUDA kernels do not run the experts' weight type yet");
    size_t one = (size_t)e[0].rows * e[0].row_bytes;
    uint8_t *d;
    lilac_status st = lilac_cuda_model_alloc(cm, (void **)&d, one * (size_t)(e2 ? 2 * n : n), err);
    if (!st)
        st = up_expert_run(d, e, n, one, err);
    if (!st && e2)
        st = up_expert_run(d + one * (size_t)n, e2, n, one, err);
    if (!st) {
        *out = (lilac_cuda_mat){d, e[0].type, e[0].rows, e[0].cols, e[0].row_bytes};
        if (e2)
            *out2 = (lilac_cuda_mat){d + one * (size_t)n, e[0].type, e[0].rows, e[0].cols, e[0].row_bytes};
        *stride = one;
    }
    return st;
}

/* Whether the gate and up experts can share one allocation (and one product). */
static bool same_layout(const lilac_mat *a, const lilac_mat *b)
{
    return a && b && a[0].data && b[0].data && a[0].type == b[0].type && a[0].rows == b[0].rows &&
           a[0].cols == b[0].cols && a[0].row_bytes == b[0].row_bytes;
}

lilac_status lilac_cuda_model_new(lilac_model *m, lilac_cuda_model **out, lilac_error *err)
{
    *out = NULL;
    char msg[256];
    if (!lilac_cuda_available(msg, sizeof msg))
        return lilac_fail(err, LILAC_E_UNSUPPORTED, "no CUDA device can be used: %s", msg);
    const lilac_hparams *hp = &m->hp;
    size_t total = 0, free_b = 0;
    int ccM = 0, ccm = 0;
    char name[128] = "";
    lilac_cuda_device_info(name, sizeof name, &total, &free_b, &ccM, &ccm);
    /* the refusal rule of the CPU plan, against device memory: weights and a margin for state */
    if ((uint64_t)free_b < m->weight_bytes + (64ull << 20))
        return lilac_fail(err, LILAC_E_NOMEM,
                          "the weights need %.2f GiB of GPU memory; %s has %.2f GiB free: use a smaller quantization",
                          m->weight_bytes / 1073741824.0, name, free_b / 1073741824.0);
    lilac_cuda_model *cm = calloc(1, sizeof *cm);
    if (!cm)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    snprintf(cm->device, sizeof cm->device, "%s (%.1f GiB, sm_%d%d)", name, total / 1073741824.0, ccM, ccm);
    cm->n_layer = hp->n_layer;
    lilac_status st = LILAC_OK;
    if (hp->n_expert > 512 || hp->n_expert_used > 32)
        st = lilac_fail(err, LILAC_E_UNSUPPORTED, "the CUDA backend routes up to 512 experts, 32 a token (this model: %d, %d)",
                        hp->n_expert, hp->n_expert_used);
    if (!st && (lilac_cuda_stream_new(&cm->stream, msg, sizeof msg) || lilac_cuda_stream_new(&cm->aux, msg, sizeof msg)))
        st = cuda_err(err, "stream", msg);
    for (int i = 0; !st && i < 2; i++)
        if (lilac_cuda_event_new(&cm->ev[i]))
            st = lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA: creating an event failed");
    cm->layers = calloc((size_t)hp->n_layer, sizeof *cm->layers);
    if (!st && !cm->layers)
        st = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    int E = hp->n_embd;
    if (!st)
        st = up_mat(cm, &m->w.tok_embd, &cm->tok_embd, err);
    if (!st && m->w.output.data == m->w.tok_embd.data)
        cm->output = cm->tok_embd; /* tied: one copy (the plan counts the file's bytes once) */
    else if (!st)
        st = up_mat(cm, &m->w.output, &cm->output, err);
    if (!st)
        st = up_floats(cm, m->w.output_norm, (size_t)E, &cm->output_norm, err);
    size_t C = lilac_cuda_conv_channels(hp);
    for (int il = 0; !st && il < hp->n_layer; il++) {
        const lilac_layer_weights *lw = &m->w.layers[il];
        cuda_layer *cl = &cm->layers[il];
        st = up_floats(cm, lw->attn_norm, (size_t)E, &cl->attn_norm, err);
        if (!st)
            st = up_floats(cm, lw->post_norm, (size_t)E, &cl->post_norm, err);
        if (!st && hp->layer_kind[il] == LILAC_LAYER_ATTENTION) {
            if (!st)
                st = up_joined(cm, &lw->wq, &lw->wk, &cl->wq, &cl->wk, &cl->wqk, err);
            if (!st)
                st = up_mat(cm, &lw->wv, &cl->wv, err);
            if (!st)
                st = up_mat(cm, &lw->wo, &cl->wo, err);
            if (!st)
                st = up_floats(cm, lw->q_norm, (size_t)hp->head_dim, &cl->q_norm, err);
            if (!st)
                st = up_floats(cm, lw->k_norm, (size_t)hp->head_dim, &cl->k_norm, err);
        } else if (!st) {
            if (!st)
                st = up_joined(cm, &lw->ssm_qkv, &lw->ssm_z, &cl->ssm_qkv, &cl->ssm_z, &cl->ssm_qkvz, err);
            if (!st)
                st = up_joined(cm, &lw->ssm_alpha, &lw->ssm_beta, &cl->ssm_alpha, &cl->ssm_beta, &cl->ssm_ab, err);
            if (!st)
                st = up_mat(cm, &lw->ssm_out, &cl->ssm_out, err);
            if (!st)
                st = up_floats(cm, lw->ssm_conv, C * (size_t)hp->ssm_conv_kernel, &cl->ssm_conv, err);
            if (!st)
                st = up_floats(cm, lw->ssm_a, (size_t)hp->ssm_v_heads, &cl->ssm_a, err);
            if (!st)
                st = up_floats(cm, lw->ssm_dt, (size_t)hp->ssm_v_heads, &cl->ssm_dt, err);
            if (!st)
                st = up_floats(cm, lw->ssm_norm, (size_t)hp->ssm_v_dim, &cl->ssm_norm, err);
        }
        if (!st)
            st = up_router(cm, &lw->router, hp->shared_ff > 0 ? lw->sh_gate_inp : NULL, &cl->router,
                           &cl->router_gate_row, err);
        cl->gu_fused = same_layout(lw->exp_gate, lw->exp_up);
        if (!st && cl->gu_fused) {
            st = up_experts(cm, lw->exp_gate, lw->exp_up, hp->n_expert, &cl->exp_gate, &cl->exp_up, &cl->gate_stride,
                            err);
            cl->up_stride = cl->gate_stride;
        } else if (!st) {
            st = up_experts(cm, lw->exp_gate, NULL, hp->n_expert, &cl->exp_gate, NULL, &cl->gate_stride, err);
            if (!st)
                st = up_experts(cm, lw->exp_up, NULL, hp->n_expert, &cl->exp_up, NULL, &cl->up_stride, err);
        }
        if (!st)
            st = up_experts(cm, lw->exp_down, NULL, hp->n_expert, &cl->exp_down, NULL, &cl->down_stride, err);
        if (!st && hp->shared_ff > 0) {
            st = up_joined(cm, &lw->sh_gate, &lw->sh_up, &cl->sh_gate, &cl->sh_up, &cl->sh_gu, err);
            if (!st)
                st = up_mat(cm, &lw->sh_down, &cl->sh_down, err);
            if (!st)
                st = up_floats(cm, lw->sh_gate_inp, (size_t)E, &cl->sh_gate_inp, err);
        }
    }
    /* activations of one token: sizes from cuda_mem.c's table, in its order */
    size_t k = (size_t)hp->n_expert_used, ff = (size_t)hp->expert_ff;
    void **bufs[LILAC_CUDA_DEC_NBUF] = {
        (void **)&cm->x,  (void **)&cm->xn,   (void **)&cm->tmp, (void **)&cm->qg,     (void **)&cm->vb,
        (void **)&cm->att, (void **)&cm->qkv, (void **)&cm->conv, (void **)&cm->a,     (void **)&cm->o,
        (void **)&cm->rl,     (void **)&cm->rw,
        (void **)&cm->gbuf, (void **)&cm->ex, (void **)&cm->shg, (void **)&cm->sho,
        (void **)&cm->logits, (void **)&cm->att_part, (void **)&cm->tok, (void **)&cm->idx, (void **)&cm->count,
        (void **)&cm->part, (void **)&cm->top,
    };
    size_t sizes[LILAC_CUDA_DEC_NBUF];
    lilac_cuda_decode_sizes(hp, sizes);
    for (size_t i = 0; !st && i < LILAC_CUDA_DEC_NBUF; i++)
        st = lilac_cuda_model_alloc(cm, bufs[i], sizes[i], err);
    if (!st) { /* each right after the other: one product writes both (up_joined) */
        cm->ubuf = cm->gbuf + k * ff;
        cm->kb = cm->qg + (size_t)hp->n_head * hp->head_dim * (hp->attn_output_gate ? 2 : 1);
        cm->z = cm->qkv + C;
        cm->b = cm->a + hp->ssm_v_heads;
        cm->shu = cm->shg + (hp->shared_ff > 0 ? hp->shared_ff : 1);
    }
    if (!st && lilac_cuda_memset(cm->count, 0, 2 * sizeof *cm->count, cm->stream))
        st = lilac_fail(err, LILAC_E_UNSUPPORTED, "CUDA: clearing a counter failed");
    if (!st && lilac_cuda_host_alloc((void **)&cm->logits_host, (size_t)hp->n_vocab * sizeof(float)))
        cm->logits_host = NULL; /* then straight into the caller's memory, slower */
    if (!st && lilac_cuda_host_alloc((void **)&cm->tok_host, 2 * sizeof *cm->tok_host))
        cm->tok_host = NULL;
    if (st) {
        lilac_cuda_model_free(cm);
        return st;
    }
    *out = cm;
    return LILAC_OK;
}

void lilac_cuda_model_free(lilac_cuda_model *cm)
{
    if (!cm)
        return;
    timing_report();
    for (size_t i = 0; i < cm->n_allocs; i++)
        lilac_cuda_free(cm->allocs[i]);
    free(cm->allocs);
    lilac_cuda_prefill_free(cm);
    free(cm->layers);
    lilac_cuda_host_free(cm->logits_host);
    lilac_cuda_host_free(cm->tok_host);
    for (int i = 0; i < 2; i++)
        lilac_cuda_event_free(cm->ev[i]);
    lilac_cuda_stream_free(cm->aux);
    lilac_cuda_stream_free(cm->stream);
    free(cm);
}

const char *lilac_cuda_model_device(const lilac_cuda_model *cm) { return cm->device; }
uint64_t lilac_cuda_model_bytes(const lilac_cuda_model *cm) { return cm ? (uint64_t)cm->bytes : 0; }

lilac_status lilac_cuda_seq_new(lilac_model *m, int n_ctx, lilac_cuda_seq **out, lilac_error *err)
{
    *out = NULL;
    const lilac_hparams *hp = &m->hp;
    /* cuda_mem.c: the same sizes the GPU memory plan counts */
    lilac_cuda_seq_sizes sz = lilac_cuda_seq_sizes_of(hp, n_ctx);
    size_t kv = sz.kv_layer, cv = sz.conv_layer, sv = sz.ssm_layer, total = sz.total;
    size_t dev_total = 0, dev_free = 0;
    int a, b;
    char name[128] = "";
    lilac_cuda_device_info(name, sizeof name, &dev_total, &dev_free, &a, &b);
    if (total + (64u << 20) > dev_free)
        return lilac_fail(err, LILAC_E_NOMEM,
                          "a %d-token context needs %.2f GiB of GPU memory; %s has %.2f GiB free: use a smaller "
                          "context or fewer parallel sequences",
                          n_ctx, total / 1073741824.0, name, dev_free / 1073741824.0);
    lilac_cuda_seq *cs = calloc(1, sizeof *cs);
    char msg[256];
    if (!cs)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    cs->k = calloc((size_t)hp->n_layer * 4, sizeof(float *));
    if (!cs->k || lilac_cuda_malloc(&cs->block, total, msg, sizeof msg)) {
        bool oom = !cs->k;
        free(cs->k);
        free(cs);
        return cuda_err(err, "device memory for a sequence", oom ? "out of memory" : msg);
    }
    cs->v = cs->k + hp->n_layer, cs->conv = cs->v + hp->n_layer, cs->ssm = cs->conv + hp->n_layer;
    cs->bytes = total;
    cs->n_ctx = n_ctx;
    uint8_t *p = cs->block;
    for (int i = 0; i < hp->n_layer; i++) {
        if (hp->layer_kind[i] == LILAC_LAYER_ATTENTION) {
            cs->k[i] = (float *)p, p += kv;
            cs->v[i] = (float *)p, p += kv;
        } else {
            cs->conv[i] = (float *)p, p += cv;
            cs->ssm[i] = (float *)p, p += sv;
        }
    }
    cs->scores = (float *)p;
    lilac_cuda_seq_reset(m, cs);
    *out = cs;
    return LILAC_OK;
}

void lilac_cuda_seq_free(lilac_cuda_seq *cs)
{
    if (!cs)
        return;
    lilac_cuda_graph_free(cs->graph);
    lilac_cuda_free(cs->block);
    free(cs->k);
    free(cs);
}

void lilac_cuda_seq_reset(lilac_model *m, lilac_cuda_seq *cs)
{
    const lilac_hparams *hp = &m->hp;
    lilac_cuda_seq_sizes sz = lilac_cuda_seq_sizes_of(hp, cs->n_ctx);
    size_t cv = sz.conv_layer, sv = sz.ssm_layer;
    for (int i = 0; i < hp->n_layer; i++)
        if (hp->layer_kind[i] != LILAC_LAYER_ATTENTION)
            lilac_cuda_memset(cs->conv[i], 0, cv + sv, m->cuda->stream); /* conv and ssm adjacent */
    char msg[256];
    lilac_cuda_sync(m->cuda->stream, msg, sizeof msg);
}

lilac_status lilac_cuda_seq_copy(lilac_model *m, lilac_cuda_seq *dst, const lilac_cuda_seq *src, int pos,
                                 lilac_error *err)
{
    const lilac_hparams *hp = &m->hp;
    lilac_cuda_seq_sizes sz = lilac_cuda_seq_sizes_of(hp, pos);
    size_t kv = sz.kv_layer, cv = sz.conv_layer, sv = sz.ssm_layer;
    for (int i = 0; i < hp->n_layer; i++) {
        if (hp->layer_kind[i] == LILAC_LAYER_ATTENTION) {
            lilac_cuda_copy(dst->k[i], src->k[i], kv, m->cuda->stream);
            lilac_cuda_copy(dst->v[i], src->v[i], kv, m->cuda->stream);
        } else {
            lilac_cuda_copy(dst->conv[i], src->conv[i], cv + sv, m->cuda->stream);
        }
    }
    char msg[256];
    if (lilac_cuda_sync(m->cuda->stream, msg, sizeof msg))
        return cuda_err(err, "copying a sequence", msg);
    return LILAC_OK;
}

/* LILAC_CUDA_TIMING=1: each operation synchronized and timed, the totals
 * printed when the model is freed (a profile without a profiler). */
#include <time.h>
static int g_timing = -1;
#define N_OPS 64
static double g_op_s[N_OPS];
static long g_op_n[N_OPS];
static const char *g_op_name[N_OPS];
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}
/* Count seconds against the operation called name (a slot per name). */
static void op_time(const char *name, double s)
{
    int i = 0;
    while (i < N_OPS - 1 && g_op_name[i] && strcmp(g_op_name[i], name) != 0)
        i++;
    g_op_name[i] = name;
    g_op_s[i] += s;
    g_op_n[i]++;
}

/* The prefill's and the batched step's sections (decoder_cuda_prefill.c) in the same table: with
 * LILAC_CUDA_TIMING=1, the stream synchronized and the seconds since *t counted against name, *t moved on. */
void lilac_cuda_op_mark(lilac_cuda_stream *s, const char *name, double *t)
{
    if (g_timing < 0)
        g_timing = lilac_env_switch("LILAC_CUDA_TIMING", false);
    if (g_timing != 1)
        return;
    char m[8];
    lilac_cuda_sync(s, m, sizeof m);
    const double now = now_s();
    if (name)
        op_time(name, now - *t);
    *t = now;
}

/* LILAC_CUDA_TRACE=1: one replayed step (the TRACE_STEP-th call of
 * run_step, or the first after it with the graph) is run with the kernels'
 * own recording on (kernels/cuda/cuda_trace.cuh), and its table written to
 * stderr or to LILAC_CUDA_TRACE_FILE (model/cuda_trace.h). step() notes its
 * launches' names while tracing is on: g_names, from the last call (the
 * graph's capture, or the traced step itself). */
#define TRACE_STEP 8
#define TRACE_EVENTS ((size_t)1 << 22) /* 96 MiB: ~400 launches of up to ~1000 blocks, 5 slots a block */
static int g_trace = -1, g_trace_layer = -1;
static lilac_trace_name *g_names;
static size_t g_n_names, g_cap_names;
static bool trace_on(void)
{
    if (g_trace < 0)
        g_trace = lilac_env_switch("LILAC_CUDA_TRACE", false);
    return g_trace == 1;
}
/* Each name's blocks from the launch notes (lilac_cuda_launch_notes): the names appended since the last
 * attribution take the launches noted since, where their counts agree (else they stay unknown, 0). */
static size_t g_attr_names;        /* the names before it are done */
static unsigned long g_notes_seen; /* the notes before it are done */
static void trace_attribute(void)
{
    const unsigned long got = lilac_cuda_launch_notes(NULL, 0);
    const size_t pn = g_n_names - g_attr_names;
    if (got == g_notes_seen)
        return; /* the names wait for their launches */
    unsigned last[LILAC_CUDA_LAUNCH_NOTES];
    if (got - g_notes_seen == pn && pn <= LILAC_CUDA_LAUNCH_NOTES) {
        lilac_cuda_launch_notes(last, (int)pn);
        for (size_t i = 0; i < pn; i++)
            g_names[g_attr_names + i].blocks = (int)last[i];
    }
    g_attr_names = g_n_names, g_notes_seen = got;
}
/* Launches made before the names that come next (not through the helpers that note them, or unnamed): done. */
static void trace_skip(void) { g_attr_names = g_n_names, g_notes_seen = lilac_cuda_launch_notes(NULL, 0); }

/* A launch of op (call: its source text; "...aux)": on the second stream). */
static void trace_name(const char *op, const char *call)
{
    int k[2];
    const int nk = lilac_trace_op_kernels(op, k);
    const size_t len = strlen(call);
    const int branch = len >= 4 && !strcmp(call + len - 4, "aux)");
    for (int i = 0; i < nk; i++) {
        if (g_n_names == g_cap_names) {
            size_t cap = g_cap_names ? 2 * g_cap_names : 512;
            lilac_trace_name *a = realloc(g_names, cap * sizeof *a);
            if (!a)
                return;
            g_names = a, g_cap_names = cap;
        }
        g_names[g_n_names++] = (lilac_trace_name){op, g_trace_layer, branch, k[i], 0};
    }
    trace_attribute(); /* a name given after its launch (the callers that name what they launched) */
}

#define OP(name, call)                                                                                         \
    do {                                                                                                       \
        if (g_trace == 1) {                                                                                    \
            trace_skip();                                                                                      \
            trace_name(name, #call);                                                                           \
        }                                                                                                      \
        double t0_ = 0;                                                                                        \
        lilac_cuda_op_mark(s, NULL, &t0_);                                                                     \
        call;                                                                                                  \
        if (g_trace == 1)                                                                                      \
            trace_attribute();                                                                                 \
        lilac_cuda_op_mark(s, name, &t0_);                                                                     \
    } while (0)

static void timing_report(void)
{
    if (g_timing != 1)
        return;
    double total = 0;
    for (int i = 0; i < N_OPS; i++)
        total += g_op_s[i];
    for (int i = 0; i < N_OPS; i++)
        if (g_op_n[i])
            fprintf(stderr, "cuda op %-12s %8ld calls %9.3f ms %5.1f %%  %7.2f us/call\n", g_op_name[i], g_op_n[i],
                    g_op_s[i] * 1e3, 100 * g_op_s[i] / total, g_op_s[i] / g_op_n[i] * 1e6);
}

/* The decode step's switches (lilac_cuda_step_sw, LILAC_CUDA_*), read at its first call (measurements in
 * bench/README.md). Measured and removed (tg128, H200, one call, 2026-11-30, against 319.2/320.3 without): DN_AB=1, the
 * DeltaNet kernel's warp 2 computing alpha and beta before its wait, 208.9 (one warp, 64 dots of 2048 columns
 * in series); NORM_FOLD=1, the next layer's input norm folded into its mixer's products from the sum's parts,
 * 296.8 (every product block recomputing the norm's scale before its x loads, a serial phase dearer than the
 * sum kernel's tail it removed). Removed after session 13 (the code at bcc1639): QKV_CONV=1, the conv in the qkv
 * product's kernel, 297 against 331-339; MOE_FUSED=1, the layer's tail as one cooperative kernel, 183. */

const lilac_cuda_step_sw *lilac_cuda_step_switches(void)
{
    static lilac_cuda_step_sw sw;
    static bool read;
    if (!read) {
        sw = (lilac_cuda_step_sw){
            .norm_router = lilac_env_switch("LILAC_CUDA_NORM_ROUTER", true),
            .route_tail = lilac_env_switch("LILAC_CUDA_ROUTE_TAIL", false),
            .sum_grid = lilac_env_switch("LILAC_CUDA_SUM_GRID", true),
            .down_sum = lilac_env_switch("LILAC_CUDA_DOWN_SUM", true),
            .route_fused = lilac_env_switch("LILAC_CUDA_ROUTE_FUSED", true),
        };
        read = true;
    }
    return &sw;
}

/* One token at position pos; logits to cm->logits. */
static void step(lilac_model *m, lilac_cuda_seq *cs)
{
    if (g_timing < 0)
        g_timing = lilac_env_switch("LILAC_CUDA_TIMING", false);
    if (trace_on()) {
        g_n_names = 0, g_trace_layer = -1;
        trace_skip();
    }
    lilac_cuda_model *cm = m->cuda;
    const lilac_hparams *hp = &m->hp;
    lilac_cuda_stream *s = cm->stream;
    int E = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
    int q_step = hd * (hp->attn_output_gate ? 2 : 1);
    int nk = hp->ssm_k_heads, nv = hp->ssm_v_heads, dk = hp->ssm_k_dim, dv = hp->ssm_v_dim;
    int C = 2 * nk * dk + nv * dv, k = hp->n_expert_used;
    const int *pos = cm->tok + 1; /* everything position-dependent reads it on the device: one graph for all steps */
    lilac_cuda_stream *aux = cm->aux;
    float eps = hp->norm_eps;
    bool shared = hp->shared_ff > 0;
    const lilac_cuda_step_sw *sw = lilac_cuda_step_switches();
    OP("get_row", lilac_cuda_get_row(&cm->tok_embd, cm->tok, cm->x, s));
    OP("rmsnorm", lilac_cuda_rmsnorm(cm->x, cm->layers[0].attn_norm, cm->xn, 1, E, eps, s));
    for (int il = 0; il < hp->n_layer; il++) {
        const cuda_layer *cl = &cm->layers[il];
        g_trace_layer = il;
        /* x += mixer(xn): the small products of the same input on the second branch; the output product
         * (wout . xout, added into x) below */
        const lilac_cuda_mat *wout;
        const float *xout;
        lilac_cuda_fork(s, aux, cm->ev[0]);
        if (hp->layer_kind[il] == LILAC_LAYER_ATTENTION) {
            /* q (with its gate) and k in one product where they share a type: k lands at kb, right after q */
            if (!cl->wqk.data)
                OP("matvec", lilac_cuda_matvec(&cl->wk, cm->xn, cm->kb, 1, aux));
            OP("matvec", lilac_cuda_matvec(&cl->wv, cm->xn, cm->vb, 1, aux));
            OP("matvec", lilac_cuda_matvec(cl->wqk.data ? &cl->wqk : &cl->wq, cm->xn, cm->qg, 1, s));
            lilac_cuda_fork(aux, s, cm->ev[1]);
            OP("norm_rope_kv", lilac_cuda_norm_rope_kv(cm->qg, cl->q_norm, q_step, nh, cm->kb, cm->vb, cl->k_norm,
                                                       cs->k[il], cs->v[il], nkv, hd, hp->rope_dims, pos,
                                                       hp->rope_theta, eps, s));
            OP("attention",
               lilac_cuda_attention(cm->qg, q_step, cs->k[il], cs->v[il], pos, nh, nkv, hd, cm->att, cs->scores,
                   cs->n_ctx, cm->att_part, hp->attn_output_gate, s));
            wout = &cl->wo, xout = cm->att;
        } else {
            int tiled = m->w.ssm_v_tiled, K = hp->ssm_conv_kernel;
            /* qkv and z in one product where they share a type (z lands right after qkv), alpha and beta in one
             * on the second branch: two launches on the chain fewer */
            const bool qkvz = cl->ssm_qkvz.data != NULL;
            if (!qkvz)
                OP("matvec", lilac_cuda_matvec(&cl->ssm_z, cm->xn, cm->z, 1, aux));
            if (cl->ssm_ab.data) {
                OP("matvec", lilac_cuda_matvec(&cl->ssm_ab, cm->xn, cm->a, 1, aux));
            } else {
                OP("matvec", lilac_cuda_matvec(&cl->ssm_alpha, cm->xn, cm->a, 1, aux));
                OP("matvec", lilac_cuda_matvec(&cl->ssm_beta, cm->xn, cm->b, 1, aux));
            }
            OP("matvec", lilac_cuda_matvec(qkvz ? &cl->ssm_qkvz : &cl->ssm_qkv, cm->xn, cm->qkv, 1, s));
            lilac_cuda_fork(aux, s, cm->ev[1]);
            OP("conv_step", lilac_cuda_conv_step(cm->qkv, cs->conv[il], cl->ssm_conv, cm->conv, C, K, s));
            if (lilac_cuda_deltanet_fused(cm->conv, cm->a, cm->b, cl->ssm_a, cl->ssm_dt, cs->ssm[il], cm->o, cm->z,
                                          cl->ssm_norm, nk, nv, dk, dv, tiled, eps, s)) { /* other shapes: */
                if (g_trace == 1)
                    trace_name("pf_deltanet", "");
                lilac_cuda_pf_deltanet(cm->conv, C, cm->a, cm->b, cl->ssm_a, cl->ssm_dt, cs->ssm[il], cm->o, cm->z,
                                       cl->ssm_norm, nk, nv, dk, dv, tiled, eps, 1, NULL, s);
            } else if (g_trace == 1) {
                trace_name("deltanet", "");
            }
            wout = &cl->ssm_out, xout = cm->o;
        }
        const float *next_norm = il + 1 < hp->n_layer ? cm->layers[il + 1].attn_norm : cm->output_norm;
        OP("matvec", lilac_cuda_matvec_fused(wout, 0, NULL, 1, xout, NULL, 0, cm->x, 1, s));
        const lilac_cuda_route_args ra = {
            .E = hp->n_expert, .k = k, .norm = hp->norm_topk, .up_offset = cl->gu_fused ? hp->n_expert : 0,
            .shared_row = shared, .idx = cm->idx, .w = cm->rw, .count = cm->count,
        };
        const bool tail = sw->route_tail && (!shared || cl->router_gate_row);
        /* the shared expert's gate as the router's row n_expert, where it is stored there: its dot off the
         * route kernel (which took a third of that kernel's stall samples in ncu) */
        const bool gate_row = shared && cl->router_gate_row;
        bool routed = sw->norm_router && cl->router.type == LILAC_F32 &&
                      !lilac_cuda_norm_router(cm->x, cl->post_norm, cm->xn, cl->router.data,
                                              (long long)(cl->router.row_bytes / sizeof(float)),
                                              (int)cl->router.rows + gate_row, cm->rl, E, eps,
                                              tail ? &ra : NULL, s);
        if (routed && g_trace == 1)
            trace_name("norm_router", "");
        if (!routed)
            OP("rmsnorm", lilac_cuda_rmsnorm(cm->x, cl->post_norm, cm->xn, 1, E, eps, s));
        /* x += moe(xn): the shared expert on the second branch, the routed ones on the main (the shared one on the
         * main stream before them, no join, measured: tg128 325.6 against 386.8, session 29) */
        if (shared) {
            lilac_cuda_fork(s, aux, cm->ev[0]);
            if (cl->sh_gu.data) { /* gate and up in one product: up lands at shu, right after the gate */
                OP("matvec", lilac_cuda_matvec(&cl->sh_gu, cm->xn, cm->shg, 1, aux));
            } else {
                OP("matvec", lilac_cuda_matvec(&cl->sh_gate, cm->xn, cm->shg, 1, aux));
                OP("matvec", lilac_cuda_matvec(&cl->sh_up, cm->xn, cm->shu, 1, aux));
            }
            OP("matvec",
               lilac_cuda_matvec_fused(&cl->sh_down, 0, NULL, 1, cm->shg, cm->shu, 0, cm->sho, 0, aux));
        }
        /* the routing takes the shared expert's gate too */
        if (!routed)
            OP("matvec", lilac_cuda_matvec(&cl->router, cm->xn, cm->rl, 1, s));
        /* the routing inside the gate+up product: one kernel boundary less on the chain */
        bool fused_gu = sw->route_fused && routed && !tail && cl->gu_fused && (!shared || gate_row);
        if (fused_gu) {
            fused_gu = !lilac_cuda_matvec_experts_routed(&cl->exp_gate, cl->gate_stride, cm->rl, &ra, cm->xn,
                                                         cm->gbuf, s);
            if (fused_gu && g_trace == 1)
                trace_name("matvec_experts", "");
        }
        if (!fused_gu && (!routed || !tail))
            OP("route", lilac_cuda_route(cm->rl, hp->n_expert, k, hp->norm_topk, cm->idx, cm->rw,
                                         cl->gu_fused ? hp->n_expert : 0,
                                         shared && !(routed && gate_row) ? cl->sh_gate_inp : NULL, cm->xn, E,
                                         shared && routed && gate_row ? cm->rl + hp->n_expert : NULL, s));
        if (fused_gu) { /* gate and up ran above, with the routing */
        } else if (cl->gu_fused) { /* gate and up of the k experts: 2k slots of one product */
            OP("matvec_experts",
               lilac_cuda_matvec_experts(&cl->exp_gate, cl->gate_stride, cm->idx, 2 * k, cm->xn, 0, cm->gbuf, s));
        } else {
            OP("matvec_experts",
               lilac_cuda_matvec_experts(&cl->exp_gate, cl->gate_stride, cm->idx, k, cm->xn, 0, cm->gbuf, s));
            OP("matvec_experts",
               lilac_cuda_matvec_experts(&cl->exp_up, cl->up_stride, cm->idx, k, cm->xn, 0, cm->ubuf, s));
        }
        /* The join makes the down+sum kernel a node of two programmatic upstreams, which starts only after the
         * gate+up product ends (session 28's trace): its experts' rows copied as soon as the routing is flagged
         * (LILAC_CUDA_DS_PRE, code at d096a7c; a preferred carveout of 100 % for the big-smem kernels,
         * LILAC_CUDA_CARVEOUT, 22d7da6) changed nothing, tg128 within 1 % either way. The shared expert as the
         * routed products' k+1-th slot would leave it one. */
        if (shared)
            lilac_cuda_fork(aux, s, cm->ev[1]);
        if (sw->down_sum && !lilac_cuda_moe_down_sum(&cl->exp_down, cl->down_stride, cm->idx, k, cm->gbuf, cm->ubuf,
                                                     cm->rw, shared ? cm->sho : NULL, cm->x, next_norm, cm->xn, eps,
                                                     cm->part, cm->count + 1, s)) {
            if (g_trace == 1)
                trace_name("moe_down_sum", "");
            continue;
        }
        OP("matvec_experts", lilac_cuda_matvec_fused(&cl->exp_down, cl->down_stride, cm->idx, k, cm->gbuf, cm->ubuf,
                                                     1, cm->ex, 0, s));
        /* x += the experts' sum, and the next layer's input norm (the output norm after the last layer) */
        /* over a grid of blocks (LILAC_CUDA_SUM_GRID=0: one block) */
        if (!sw->sum_grid || lilac_cuda_moe_sum_norm_grid(cm->x, cm->ex, cm->rw, k, shared ? cm->sho : NULL,
                                                          cm->rw + k, next_norm, cm->xn, E, eps, cm->part,
                                                          cm->count + 1, s))
            OP("moe_sum_norm", lilac_cuda_moe_sum_norm(cm->x, cm->ex, cm->rw, k, shared ? cm->sho : NULL,
                                                       cm->rw + k, next_norm, cm->xn, E, eps, s));
        else if (g_trace == 1)
            trace_name("moe_sum_norm", "");
    }
}

/* The step as a CUDA graph: captured at the sequence's second step (the
 * first sets the kernels' cached attributes, which capture does not allow),
 * replayed after; LILAC_CUDA_GRAPH=0 or timing turns it off. */
static int graph_use(void)
{
    static int use = -1;
    if (use < 0)
        use = lilac_env_switch("LILAC_CUDA_GRAPH", true);
    return use;
}

static void run_step_inner(lilac_model *m, lilac_cuda_seq *cs)
{
    lilac_cuda_model *cm = m->cuda;
    const int use = graph_use();
    if (!use || g_timing == 1 || cs->graph_failed || cs->steps++ == 0) {
        step(m, cs);
        return;
    }
    if (!cs->graph) {
        if (lilac_cuda_capture_begin(cm->stream)) {
            cs->graph_failed = true;
            step(m, cs);
            return;
        }
        step(m, cs);
        if (lilac_cuda_capture_end(cm->stream, &cs->graph)) {
            cs->graph_failed = true; /* nothing ran: run it plainly */
            step(m, cs);
            return;
        }
    }
    if (lilac_cuda_graph_launch(cs->graph, cm->stream)) {
        cs->graph_failed = true;
        step(m, cs);
    }
}

/* The step with the kernels' recording on, and its table (LILAC_CUDA_TRACE). */
static void trace_step(lilac_model *m, lilac_cuda_seq *cs, long call)
{
    char msg[256];
    const bool replay = cs->graph && !cs->graph_failed && g_timing != 1;
    if (lilac_cuda_trace_begin(TRACE_EVENTS, msg, sizeof msg)) {
        fprintf(stderr, "cuda trace: %s\n", msg);
        run_step_inner(m, cs);
        return;
    }
    run_step_inner(m, cs);
    lilac_trace_ev *ev = NULL;
    size_t n = 0;
    uint64_t dropped = 0;
    if (lilac_cuda_trace_end(&ev, &n, &dropped, msg, sizeof msg)) {
        fprintf(stderr, "cuda trace: %s\n", msg);
        return;
    }
    lilac_trace_rec *rec = malloc((n ? n : 1) * sizeof *rec);
    lilac_trace_launch *L = malloc((n ? n : 1) * sizeof *L);
    const char *path = getenv("LILAC_CUDA_TRACE_FILE");
    FILE *f = path && *path ? fopen(path, "w") : stderr;
    if (!f) {
        fprintf(stderr, "cuda trace: cannot write %s; to stderr\n", path);
        f = stderr;
    }
    if (rec && L) {
        size_t nr = lilac_trace_assemble(ev, n, rec);
        size_t nl = lilac_trace_launches(rec, nr, L);
        fprintf(f, "cuda trace: call %ld of the decode step (%s), %zu events\n", call,
                replay ? "a replay of the captured graph" : "launched kernel by kernel", n);
        lilac_trace_write(f, L, nl, g_names, g_n_names, rec, nr, dropped);
    } else {
        fprintf(stderr, "cuda trace: out of memory\n");
    }
    if (f != stderr)
        fclose(f);
    free(L);
    free(rec);
    free(ev);
}

static void run_step(lilac_model *m, lilac_cuda_seq *cs)
{
    static long calls;
    static bool traced;
    if (!trace_on() || traced || ++calls < TRACE_STEP ||
        !((cs->graph && !cs->graph_failed) || !graph_use() || g_timing == 1)) {
        run_step_inner(m, cs);
        return;
    }
    traced = true;
    trace_step(m, cs, calls);
}

int lilac_cuda_top_rows(lilac_cuda_model *cm, const float *logits, int V, int rows, int k,
                        lilac_logits_top *const *tops, char *msg, size_t cap)
{
    if (rows < 1 || rows > LILAC_CUDA_TOP_ROWS) {
        snprintf(msg, cap, "the sampler's reduction takes 1 to %d rows, not %d", LILAC_CUDA_TOP_ROWS, rows);
        return -1;
    }
    if (!lilac_cuda_logits_top(logits, V, rows, V, k, cm->top, cm->stream)) {
        if (lilac_cuda_download(cm->top_host, cm->top, (size_t)rows * LILAC_CUDA_TOP_OUT, cm->stream, msg, cap))
            return -1;
        for (int r = 0; r < rows; r++)
            if (tops[r])
                memcpy(tops[r], cm->top_host + (size_t)r * LILAC_CUDA_TOP_OUT, sizeof *tops[r]);
        return 0;
    }
    float *host = cm->logits_host ? cm->logits_host : malloc((size_t)V * sizeof *host);
    int rc = host ? 0 : -1;
    if (!host)
        snprintf(msg, cap, "out of memory for a row of logits");
    for (int r = 0; !rc && r < rows; r++)
        if (tops[r] && !(rc = lilac_cuda_download(host, logits + (size_t)r * V, (size_t)V * sizeof *host, cm->stream,
                                                 msg, cap)))
            lilac_logits_top_of(host, V, k, tops[r]);
    if (host != cm->logits_host)
        free(host);
    return rc;
}

lilac_status lilac_cuda_eval(lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                             lilac_error *err)
{
    lilac_model *m = s->m;
    lilac_cuda_model *cm = m->cuda;
    int V = m->hp.n_vocab;
    char msg[256];
    /* decoder_cuda_prefill.c: the chunk's tokens through each layer together; the residual stream (hidden)
     * only there, for any n */
    if (opts->hidden && !lilac_cuda_prefill_takes(s))
        return lilac_fail(err, LILAC_E_UNSUPPORTED,
                          "the CUDA backend writes the residual stream (--hidden) only where its prefill takes the "
                          "model's shapes; --backend cpu for this one");
    if (lilac_cuda_prefill_wanted(s, n) || opts->hidden)
        return lilac_cuda_prefill(s, tokens, n, opts, err);
    const bool dst_pinned = (opts->logits_mode == LILAC_LOGITS_LAST || opts->logits_mode == LILAC_LOGITS_ALL) &&
                            lilac_cuda_host_pinned(opts->logits); /* (LILAC_LOGITS_TOP downloads no logits) */
    for (int i = 0; i < n; i++) {
        double t0 = g_timing == 1 ? now_s() : 0;
        int32_t tp_stack[2], *tp = cm->tok_host ? cm->tok_host : tp_stack;
        /* from pinned memory the copy runs from tok_host itself, which the step's end (a sync below) frees for the
         * next token; from pageable memory it is staged before the call returns */
        tp[0] = tokens[i], tp[1] = s->pos;
        if (lilac_cuda_upload_async(cm->tok, tp, 2 * sizeof *tp, cm->stream))
            return lilac_fail(err, LILAC_E_INTERNAL, "CUDA: uploading a token failed");
        if (g_timing == 1) {
            lilac_cuda_sync(cm->stream, msg, sizeof msg);
            op_time("token_up", now_s() - t0);
        }
        run_step(m, s->cuda);
        t0 = g_timing == 1 ? now_s() : 0;
        float *dst = NULL;
        const bool top = opts->logits_mode == LILAC_LOGITS_TOP && i == n - 1;
        if (opts->logits_mode == LILAC_LOGITS_ALL)
            dst = opts->logits + (size_t)i * V;
        else if (opts->logits_mode == LILAC_LOGITS_LAST && i == n - 1)
            dst = opts->logits;
        /* Measured and removed (session 29): the LM head in 4 (8) parts of rows, each part's download on the
         * second stream beside the next part: tg128 383.4/382.8 (381.1/379.0) against 384.2/386.4 */
        if (dst || top) {
            lilac_cuda_matvec(&cm->output, cm->xn, cm->logits, 1, cm->stream);
            if (g_timing == 1) { /* the product apart from the download */
                lilac_cuda_sync(cm->stream, msg, sizeof msg);
                op_time("lm_head", now_s() - t0);
                t0 = now_s();
            }
        }
        if (top) { /* the sampler's candidates reduced here: 1 KB down, not the vocabulary */
            lilac_logits_top *const one[1] = {opts->top};
            if (lilac_cuda_top_rows(cm, cm->logits, V, 1, opts->top_k, one, msg, sizeof msg))
                return cuda_err(err, "CUDA step", msg);
        } else if (dst) {
            /* through pinned memory: a copy to pageable memory runs at a fraction of the bus's speed; straight
             * into the caller's where that is pinned (lilac_logits_alloc: no 1 MB host copy a token) */
            float *via = cm->logits_host && !dst_pinned ? cm->logits_host : dst;
            if (lilac_cuda_download(via, cm->logits, (size_t)V * sizeof(float), cm->stream, msg, sizeof msg))
                return cuda_err(err, "CUDA step", msg);
            if (via != dst)
                memcpy(dst, via, (size_t)V * sizeof(float));
        } else if (lilac_cuda_sync(cm->stream, msg, sizeof msg)) {
            return cuda_err(err, "CUDA step", msg);
        }
        if (g_timing == 1)
            op_time("download", now_s() - t0);
        if (lilac_cuda_last_error(msg, sizeof msg))
            return cuda_err(err, "CUDA step", msg);
        s->pos++;
    }
    return LILAC_OK;
}

int lilac_gpu_describe(char *out, size_t cap)
{
    char msg[256];
    if (!lilac_cuda_available(msg, sizeof msg)) {
        snprintf(out, cap, "%s", msg);
        return 0;
    }
    char name[128] = "";
    size_t total = 0, free_b = 0;
    int a = 0, b = 0;
    lilac_cuda_device_info(name, sizeof name, &total, &free_b, &a, &b);
    snprintf(out, cap, "%s, %.1f GiB (%.1f free), sm_%d%d", name, total / 1073741824.0, free_b / 1073741824.0, a, b);
    return 1;
}

#else /* no CUDA */

int lilac_gpu_describe(char *out, size_t cap)
{
    snprintf(out, cap, "%s", LILAC_NO_CUDA_MSG);
    return 0;
}

lilac_status lilac_cuda_model_new(lilac_model *m, lilac_cuda_model **out, lilac_error *err)
{
    (void)m;
    *out = NULL;
    return lilac_fail(err, LILAC_E_UNSUPPORTED, LILAC_NO_CUDA_MSG);
}
void lilac_cuda_model_free(lilac_cuda_model *cm) { (void)cm; }
const char *lilac_cuda_model_device(const lilac_cuda_model *cm)
{
    (void)cm;
    return "none";
}
uint64_t lilac_cuda_model_bytes(const lilac_cuda_model *cm)
{
    (void)cm;
    return 0;
}
void lilac_cuda_model_pf_rows_set(lilac_cuda_model *cm, int rows) { (void)cm, (void)rows; }
int lilac_cuda_model_prompt_rows(const lilac_cuda_model *cm)
{
    (void)cm;
    return 0;
}
lilac_status lilac_cuda_seq_new(lilac_model *m, int n_ctx, lilac_cuda_seq **out, lilac_error *err)
{
    (void)m, (void)n_ctx;
    *out = NULL;
    return lilac_fail(err, LILAC_E_UNSUPPORTED, LILAC_NO_CUDA_MSG);
}
void lilac_cuda_seq_free(lilac_cuda_seq *cs) { (void)cs; }
void lilac_cuda_seq_reset(lilac_model *m, lilac_cuda_seq *cs) { (void)m, (void)cs; }
lilac_status lilac_cuda_seq_copy(lilac_model *m, lilac_cuda_seq *dst, const lilac_cuda_seq *src, int pos,
                                 lilac_error *err)
{
    (void)m, (void)dst, (void)src, (void)pos;
    return lilac_fail(err, LILAC_E_UNSUPPORTED, LILAC_NO_CUDA_MSG);
}
lilac_status lilac_cuda_eval(lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                             lilac_error *err)
{
    (void)s, (void)tokens, (void)n, (void)opts;
    return lilac_fail(err, LILAC_E_UNSUPPORTED, LILAC_NO_CUDA_MSG);
}
bool lilac_cuda_decode_batch_wanted(const lilac_model *m, int n)
{
    (void)m, (void)n;
    return false;
}
bool lilac_cuda_batch_exact_wanted(const lilac_model *m)
{
    (void)m;
    return false;
}
lilac_status lilac_cuda_decode_batch(lilac_model *m, lilac_seq *const *seqs, const int32_t *tokens, int n,
                                     float *const *logits, lilac_logits_top *const *tops, int top_k,
                                     lilac_error *err)
{
    (void)m, (void)seqs, (void)tokens, (void)n, (void)logits, (void)tops, (void)top_k;
    return lilac_fail(err, LILAC_E_UNSUPPORTED, LILAC_NO_CUDA_MSG);
}

#endif
