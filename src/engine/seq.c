/* seq: creating, sizing and resetting a sequence's state. */
#include "engine/seq.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "model/attention.h"
#include "model/decoder_cuda.h"
#include "model/deltanet.h"
#include "util/err.h"

static size_t conv_channels(const lilac_hparams *hp)
{
    return (size_t)(2 * hp->ssm_k_heads * hp->ssm_k_dim + hp->ssm_v_heads * hp->ssm_v_dim);
}

static size_t kv_elem_bytes(int kv_type) { return kv_type == LILAC_KV_F16 ? 2 : sizeof(float); }

/* Bytes of one attention layer's K (or V) rows [0, n) */
static size_t kv_rows_bytes(const lilac_hparams *hp, int kv_type, int n)
{
    return (size_t)n * (size_t)(hp->n_head_kv * hp->head_dim) * kv_elem_bytes(kv_type);
}

void lilac_state_sizes(const lilac_hparams *hp, int n_ctx, int kv_type, uint64_t *kv, uint64_t *rec)
{
    *kv = *rec = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        if (hp->layer_kind[i] == LILAC_LAYER_ATTENTION)
            *kv += 2ull * (uint64_t)n_ctx * (uint64_t)(hp->n_head_kv * hp->head_dim) * kv_elem_bytes(kv_type);
        else
            *rec += ((uint64_t)(hp->ssm_conv_kernel - 1) * conv_channels(hp) +
                     (uint64_t)hp->ssm_v_heads * (uint64_t)hp->ssm_k_dim * (uint64_t)hp->ssm_v_dim) *
                    sizeof(float);
    }
}

/* The widest per-token row any projection writes into scratch (logits go
 * straight to the caller's buffer). */
static size_t widest(const lilac_hparams *hp)
{
    size_t w = 0;
    size_t cand[] = {
        (size_t)hp->n_head * hp->head_dim * 2, conv_channels(hp),
        (size_t)hp->expert_ff,                 (size_t)hp->shared_ff,
        (size_t)hp->n_embd,                    (size_t)hp->ssm_v_heads * hp->ssm_v_dim,
    };
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (cand[i] > w)
            w = cand[i];
    return w;
}

static size_t per_thread_floats(const lilac_hparams *hp)
{
    /* an attention row's running and partial softmax states, or a DeltaNet
     * chunk's matrices */
    size_t dn = lilac_dn_scratch_floats(hp->ssm_k_dim, hp->ssm_v_dim);
    size_t at = hp->n_head_kv > 0 ? lilac_attn_thread_floats(hp->n_head, hp->n_head_kv, hp->head_dim) : 0;
    return (dn > at ? dn : at) + 64;
}

/* the partial attention states of a split step (model/attention.h) */
static size_t attn_parts_floats(const lilac_hparams *hp)
{
    return hp->n_head_kv > 0 ? LILAC_ATTN_PARTS * lilac_attn_part_floats(hp->n_head, hp->n_head_kv, hp->head_dim)
                             : 0;
}

static uint64_t scratch_floats(const lilac_hparams *hp, int n_tok, int n_threads)
{
    uint64_t nt = (uint64_t)n_tok, small = (uint64_t)(hp->n_expert > hp->ssm_v_heads ? hp->n_expert : hp->ssm_v_heads);
    return nt * (uint64_t)hp->n_embd * 5 + nt * widest(hp) * 3 + nt * small * 2 +
           nt * (uint64_t)hp->n_expert_used * 2 + (uint64_t)n_threads * per_thread_floats(hp) +
           attn_parts_floats(hp);
}

lilac_mem_plan lilac_model_mem_plan(const lilac_model *m, int n_ctx, int n_batch)
{
    lilac_mem_plan p;
    lilac_state_sizes(&m->hp, n_ctx, m->params.kv_type, &p.kv_bytes, &p.recurrent_bytes);
    if (n_batch > LILAC_UBATCH)
        n_batch = LILAC_UBATCH;
    p.scratch_bytes = scratch_floats(&m->hp, n_batch, m->params.n_threads) * sizeof(float) +
                      (uint64_t)n_batch * (uint64_t)(m->hp.n_expert_used + 3) * sizeof(int) +
                      (uint64_t)n_batch * 2 * sizeof(void *);
    return p;
}

/* Write a zero into each page of calloc'd memory (already zero), so that
 * the page faults of first use are taken here rather than by the first
 * token (for a DeltaNet state, a fault per page on the hot path, with a TLB
 * shootdown each when another thread runs). */
static int state_parts(const lilac_seq *s, int pos, char **ptr, size_t *n);

static void prefault(void *p, size_t bytes)
{
    volatile unsigned char *b = (volatile unsigned char *)p;
    for (size_t i = 0; i < bytes; i += 4096)
        b[i] = 0;
}

lilac_status lilac_scratch_init(lilac_scratch *sc, const lilac_model *m, int n_tok, int n_ctx, lilac_error *err)
{
    const lilac_hparams *hp = &m->hp;
    memset(sc, 0, sizeof *sc);
    (void)n_ctx; /* attention works in fixed-size ranges, whatever the context */
    uint64_t total = scratch_floats(hp, n_tok, m->params.n_threads);
    if (total > (uint64_t)SIZE_MAX / sizeof(float) / 2)
        return lilac_fail(err, LILAC_E_NOMEM, "scratch for %d tokens of a %d-token context is too large", n_tok, n_ctx);
    size_t nt = (size_t)n_tok, wide = widest(hp);
    size_t small = (size_t)(hp->n_expert > hp->ssm_v_heads ? hp->n_expert : hp->ssm_v_heads);
    sc->mem = calloc((size_t)total, sizeof(float));
    sc->ints = calloc(nt * ((size_t)hp->n_expert_used + 3), sizeof(int));
    sc->attn_kv = calloc(nt * 2, sizeof *sc->attn_kv);
    if (!sc->mem || !sc->ints || !sc->attn_kv) {
        lilac_scratch_free(sc);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory for %d tokens of scratch (%.1f MiB)", n_tok,
                          (double)total * sizeof(float) / (1 << 20));
    }
    float *p = sc->mem;
    sc->n_tok = n_tok;
    sc->x = p, p += nt * hp->n_embd;
    sc->xn = p, p += nt * hp->n_embd;
    sc->tmp = p, p += nt * hp->n_embd;
    sc->ex_in = p, p += nt * hp->n_embd;
    sc->ex_out = p, p += nt * hp->n_embd;
    sc->big0 = p, p += nt * wide;
    sc->big1 = p, p += nt * wide;
    sc->big2 = p, p += nt * wide;
    sc->big_floats = nt * wide;
    sc->small0 = p, p += nt * small;
    sc->small1 = p, p += nt * small;
    sc->route_w = p, p += nt * (size_t)hp->n_expert_used * 2;
    sc->per_thread_floats = per_thread_floats(hp);
    sc->per_thread = p, p += (size_t)m->params.n_threads * sc->per_thread_floats;
    sc->attn_parts = p;
    sc->attn_n_parts = hp->n_head_kv > 0 ? LILAC_ATTN_PARTS : 0;
    sc->route_idx = sc->ints;
    sc->ex_rows = sc->ints + nt * (size_t)hp->n_expert_used;
    sc->tok_seg = sc->ex_rows + nt;
    sc->tok_pos = sc->tok_seg + nt;
    /* written from the first token on */
    prefault(sc->mem, (size_t)total * sizeof(float));
    return LILAC_OK;
}

void lilac_scratch_free(lilac_scratch *sc)
{
    free(sc->mem);
    free(sc->ints);
    free((void *)sc->attn_kv);
    memset(sc, 0, sizeof *sc);
}

lilac_status lilac_seq_new(lilac_model *m, int n_ctx, lilac_seq **out, lilac_error *err)
{
    *out = NULL;
    const lilac_hparams *hp = &m->hp;
    if (n_ctx < 1)
        return lilac_fail(err, LILAC_E_ARG, "context size %d must be at least 1", n_ctx);
    if (m->cuda) { /* the state lives on the device */
        lilac_seq *s = calloc(1, sizeof *s);
        if (!s)
            return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        s->m = m;
        s->n_ctx = n_ctx;
        lilac_status st = lilac_cuda_seq_new(m, n_ctx, &s->cuda, err);
        if (st) {
            free(s);
            return st;
        }
        *out = s;
        return LILAC_OK;
    }
    lilac_status ps = lilac_model_prepare(m, err); /* once per model */
    if (ps)
        return ps;
    uint64_t kv, rec;
    int kv_type = m->params.kv_type;
    lilac_state_sizes(hp, n_ctx, kv_type, &kv, &rec);
    /* each layer's K and V start on a 64-byte boundary */
    uint64_t kv_part = ((uint64_t)kv_rows_bytes(hp, kv_type, n_ctx) + 63) / 64 * 64, n_attn = 0;
    for (int i = 0; i < hp->n_layer; i++)
        n_attn += hp->layer_kind[i] == LILAC_LAYER_ATTENTION;
    if (kv / (2 * (n_attn ? n_attn : 1)) > (uint64_t)SIZE_MAX / 4)
        return lilac_fail(err, LILAC_E_NOMEM, "a context of %d tokens needs too much memory", n_ctx);
    uint64_t total = (2 * n_attn * kv_part + rec + sizeof(float) - 1) / sizeof(float); /* floats */
    if (total > (uint64_t)SIZE_MAX / sizeof(float) / 2)
        return lilac_fail(err, LILAC_E_NOMEM, "a context of %d tokens needs too much memory", n_ctx);
    lilac_seq *s = calloc(1, sizeof *s);
    float *mem = calloc((size_t)total, sizeof(float));
    lilac_layer_state *ls = calloc((size_t)hp->n_layer, sizeof *ls);
    if (!s || !mem || !ls) {
        free(s);
        free(mem);
        free(ls);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory for a context of %d tokens (%.1f MiB)", n_ctx,
                          (double)total * sizeof(float) / (1 << 20));
    }
    s->m = m;
    s->n_ctx = n_ctx;
    s->kv_type = kv_type;
    s->kv_es = kv_elem_bytes(kv_type);
    s->mem = mem;
    s->mem_floats = (size_t)total;
    s->layers = ls;
    char *p = (char *)mem;
    for (int i = 0; i < hp->n_layer; i++) {
        if (hp->layer_kind[i] == LILAC_LAYER_ATTENTION) {
            ls[i].k = p, p += kv_part;
            ls[i].v = p, p += kv_part;
        } else {
            size_t conv = (size_t)(hp->ssm_conv_kernel - 1) * conv_channels(hp);
            ls[i].conv = (float *)p, p += conv * sizeof(float);
            ls[i].ssm = (float *)p, p += (size_t)hp->ssm_v_heads * hp->ssm_k_dim * hp->ssm_v_dim * sizeof(float);
        }
    }
    /* the recurrent state (the parts at position 0) is written from the
     * first token on; the KV cache only as it fills */
    char *part[2 * LILAC_MAX_LAYERS];
    size_t part_n[2 * LILAC_MAX_LAYERS];
    for (int p = 0, np = state_parts(s, 0, part, part_n); p < np; p++)
        prefault(part[p], part_n[p]);
    lilac_status st = lilac_scratch_init(&s->sc, m, LILAC_UBATCH, n_ctx, err);
    if (st != LILAC_OK) {
        lilac_seq_free(s);
        return st;
    }
    *out = s;
    return LILAC_OK;
}

void lilac_seq_free(lilac_seq *s)
{
    if (!s)
        return;
    lilac_cuda_seq_free(s->cuda);
    free(s->mem);
    free(s->layers);
    lilac_scratch_free(&s->sc);
    free(s);
}

int lilac_seq_pos(const lilac_seq *s) { return s->pos; }

/* The parts of a sequence's state at pos, in snapshot order, in bytes: the
 * K and V rows [0, pos) of each attention layer, and the conv and
 * recurrent state of each DeltaNet layer (adjacent in the sequence's
 * block, lilac_seq_new, so one part). ptr and n hold 2 * LILAC_MAX_LAYERS;
 * returns the count. */
static int state_parts(const lilac_seq *s, int pos, char **ptr, size_t *n)
{
    const lilac_hparams *hp = &s->m->hp;
    size_t kv = kv_rows_bytes(hp, s->kv_type, pos);
    size_t rec = ((size_t)(hp->ssm_conv_kernel - 1) * conv_channels(hp) +
                  (size_t)hp->ssm_v_heads * hp->ssm_k_dim * hp->ssm_v_dim) *
                 sizeof(float);
    int k = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        const lilac_layer_state *ls = &s->layers[i];
        if (hp->layer_kind[i] == LILAC_LAYER_ATTENTION) {
            ptr[k] = ls->k, n[k++] = kv;
            ptr[k] = ls->v, n[k++] = kv;
        } else {
            ptr[k] = (char *)ls->conv, n[k++] = rec;
        }
    }
    return k;
}

/* Walks the state in snapshot order; save copies out, load copies in. */
static void snapshot_copy(lilac_seq *s, char *buf, int pos, bool save)
{
    char *ptr[2 * LILAC_MAX_LAYERS];
    size_t n[2 * LILAC_MAX_LAYERS];
    int np = state_parts(s, pos, ptr, n);
    for (int p = 0; p < np; p++) {
        if (save)
            memcpy(buf, ptr[p], n[p]);
        else
            memcpy(ptr[p], buf, n[p]);
        buf += n[p];
    }
}

lilac_status lilac_seq_copy(lilac_seq *dst, const lilac_seq *src, lilac_error *err)
{
    if (dst->m != src->m)
        return lilac_fail(err, LILAC_E_ARG, "the sequences belong to different models");
    if (src->pos > dst->n_ctx)
        return lilac_fail(err, LILAC_E_RANGE, "the source holds %d tokens; the destination's context is %d", src->pos,
                          dst->n_ctx);
    if (dst == src)
        return LILAC_OK;
    if (src->cuda || dst->cuda) {
        lilac_status st = lilac_cuda_seq_copy(src->m, dst->cuda, src->cuda, src->pos, err);
        if (!st)
            dst->pos = src->pos;
        return st;
    }
    char *from[2 * LILAC_MAX_LAYERS], *to[2 * LILAC_MAX_LAYERS];
    size_t n[2 * LILAC_MAX_LAYERS];
    int np = state_parts(src, src->pos, from, n);
    state_parts(dst, src->pos, to, n);
    for (int p = 0; p < np; p++)
        memcpy(to[p], from[p], n[p]);
    dst->pos = src->pos;
    return LILAC_OK;
}

size_t lilac_seq_snapshot_floats(const lilac_seq *s)
{
    uint64_t kv, rec;
    lilac_state_sizes(&s->m->hp, s->pos, s->kv_type, &kv, &rec);
    return (size_t)((kv + rec + sizeof(float) - 1) / sizeof(float));
}

void lilac_seq_snapshot_save(const lilac_seq *s, float *dst)
{
    snapshot_copy((lilac_seq *)s, (char *)dst, s->pos, true);
}

void lilac_seq_snapshot_load(lilac_seq *s, const float *src, int pos)
{
    snapshot_copy(s, (char *)src, pos, false);
    s->pos = pos;
}

void lilac_seq_reset(lilac_seq *s)
{
    if (s->cuda) {
        lilac_cuda_seq_reset(s->m, s->cuda);
        s->pos = 0;
        return;
    }
    /* Only the recurrent state must be cleared: KV rows past pos are never
     * read, and at position 0 the state's parts are the DeltaNet ones. */
    char *ptr[2 * LILAC_MAX_LAYERS];
    size_t n[2 * LILAC_MAX_LAYERS];
    int np = state_parts(s, 0, ptr, n);
    for (int p = 0; p < np; p++)
        memset(ptr[p], 0, n[p]);
    s->pos = 0;
}

lilac_status lilac_seq_eval(lilac_seq *s, const int32_t *tokens, int n, const lilac_eval_opts *opts,
                            lilac_error *err)
{
    if (n < 1)
        return lilac_fail(err, LILAC_E_ARG, "no tokens to evaluate");
    if (!tokens)
        return lilac_fail(err, LILAC_E_ARG, "no token array given");
    if (n > s->n_ctx - s->pos)
        return lilac_fail(err, LILAC_E_RANGE, "%d token%s not fit: the sequence holds %d of its %d-token context",
                          n, n == 1 ? " does" : "s do", s->pos, s->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->hp.n_vocab)
            return lilac_fail(err, LILAC_E_ARG, "token %d at index %d is outside the vocabulary (0..%d)", tokens[i],
                              i, s->m->hp.n_vocab - 1);
    lilac_eval_opts def = {.logits_mode = LILAC_LOGITS_NONE};
    if (!opts)
        opts = &def;
    if (opts->logits_mode != LILAC_LOGITS_NONE && !opts->logits)
        return lilac_fail(err, LILAC_E_ARG, "logits requested but no buffer given");
    if (opts->logits_mode == LILAC_LOGITS_TOP) {
        if (!opts->top || opts->top_k < 1 || opts->top_k > LILAC_TOP_MAX)
            return lilac_fail(err, LILAC_E_ARG, "top candidates requested without a place for them or with top_k %d "
                                                "(1..%d)", opts->top_k, LILAC_TOP_MAX);
        if (s->cuda && n == 1 && !opts->hidden) /* the GPU's decode step reduces them on the device */
            return lilac_decoder_eval(s, tokens, n, opts, err);
        lilac_eval_opts last = *opts;
        last.logits_mode = LILAC_LOGITS_LAST;
        lilac_status st = lilac_decoder_eval(s, tokens, n, &last, err);
        if (!st)
            lilac_logits_top_of(opts->logits, s->m->hp.n_vocab, opts->top_k, opts->top);
        return st;
    }
    return lilac_decoder_eval(s, tokens, n, opts, err);
}

/* lilac_logits_alloc's block: a header saying which allocator it came from,
 * 64 bytes so that the floats keep the allocation's alignment. */
typedef union logits_hdr {
    bool pinned;
    char pad[64];
} logits_hdr;

float *lilac_logits_alloc(const lilac_model *m, size_t n)
{
    if (n > (SIZE_MAX - sizeof(logits_hdr)) / sizeof(float))
        return NULL;
    const size_t bytes = sizeof(logits_hdr) + n * sizeof(float);
    logits_hdr *b = NULL;
    bool pinned = m && m->cuda && !lilac_cuda_host_alloc((void **)&b, bytes);
    if (!pinned)
        b = malloc(bytes);
    if (!b)
        return NULL;
    b->pinned = pinned;
    return (float *)(b + 1);
}

void lilac_logits_free(float *p)
{
    if (!p)
        return;
    logits_hdr *b = (logits_hdr *)p - 1;
    if (b->pinned)
        lilac_cuda_host_free(b);
    else
        free(b);
}
