/* synth: random-weight GGUF files in the shape of published models. See
 * synth.h for the layout, the type mixes and the values. */
#include "model/synth.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/gguf_meta.h"
#include "util/err.h"

/* ---- presets: the published models' hyper-parameters ---- */

typedef struct sy_preset {
    const char *name, *arch, *title; /* title: general.name */
    bool q35;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, rope_dims;
    int sections[4];
    bool has_sections;
    float theta, eps;
    int n_ctx, ff; /* ff: feed_forward_length, 0: not written */
    int n_expert, n_used, eff, sff;
    int K, dk, nk, nv, dv, interval; /* Gated DeltaNet (qwen35moe) */
    int n_vocab;
} sy_preset;

static const sy_preset presets[] = {
    /* Qwen3.6-35B-A3B: 40 layers, 3 Gated DeltaNet then 1 gated attention */
    {.name = "qwen3.6-35b-a3b", .arch = "qwen35moe", .title = "Synthetic Qwen3.6 35B A3B", .q35 = true,
     .n_layer = 40, .n_embd = 2048, .n_head = 16, .n_head_kv = 2, .head_dim = 256, .rope_dims = 64,
     .sections = {11, 11, 10, 0}, .has_sections = true, .theta = 1e7f, .eps = 1e-6f, .n_ctx = 262144, .ff = 0,
     .n_expert = 256, .n_used = 8, .eff = 512, .sff = 512,
     .K = 4, .dk = 128, .nk = 16, .nv = 32, .dv = 128, .interval = 4, .n_vocab = 248320},
    /* Qwen3-30B-A3B: 48 full-attention layers */
    {.name = "qwen3-30b-a3b", .arch = "qwen3moe", .title = "Synthetic Qwen3 30B A3B", .q35 = false,
     .n_layer = 48, .n_embd = 2048, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .rope_dims = 128,
     .theta = 1e6f, .eps = 1e-6f, .n_ctx = 40960, .ff = 6144,
     .n_expert = 128, .n_used = 8, .eff = 768, .sff = 0, .n_vocab = 151936},
    /* The shape of the tiny-qwen35moe test fixture. */
    {.name = "tiny", .arch = "qwen35moe", .title = "Synthetic Tiny Qwen35Moe", .q35 = true,
     .n_layer = 4, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .head_dim = 128, .rope_dims = 32,
     .sections = {6, 5, 5, 0}, .has_sections = true, .theta = 1e7f, .eps = 1e-6f, .n_ctx = 4096, .ff = 0,
     .n_expert = 8, .n_used = 2, .eff = 256, .sff = 256,
     .K = 4, .dk = 128, .nk = 2, .nv = 4, .dv = 128, .interval = 4, .n_vocab = 2048},
    /* The shape of the tiny-qwen3moe test fixture. */
    {.name = "tiny-qwen3moe", .arch = "qwen3moe", .title = "Synthetic Tiny Qwen3Moe", .q35 = false,
     .n_layer = 4, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .head_dim = 128, .rope_dims = 128,
     .theta = 1e6f, .eps = 1e-6f, .n_ctx = 4096, .ff = 512,
     .n_expert = 8, .n_used = 2, .eff = 256, .sff = 0, .n_vocab = 2048},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

enum { MIX_F32, MIX_BF16, MIX_Q8_0, MIX_Q4_K_M, N_MIXES };
static const char *const mix_names[N_MIXES] = {"F32", "BF16", "Q8_0", "Q4_K_M"};
static const uint32_t mix_ftype[N_MIXES] = {GM_FTYPE_ALL_F32, GM_FTYPE_MOSTLY_BF16, GM_FTYPE_MOSTLY_Q8_0,
                                            GM_FTYPE_MOSTLY_Q4_K_M};

/* The quantized mixes are laid out as llama-quantize writes them; F32 and
 * BF16 as the converter does. */
static bool quantized_mix(int mix)
{
    return mix == MIX_Q8_0 || mix == MIX_Q4_K_M;
}

const char *lilac_synth_preset_name(size_t i)
{
    return i < N_PRESETS ? presets[i].name : NULL;
}

const char *lilac_synth_mix_name(size_t i)
{
    return i < N_MIXES ? mix_names[i] : NULL;
}

/* ---- the plan ---- */

/* What a tensor's values are. */
enum { R_MAT, R_EMBD, R_NORM, R_ROUTER, R_CONV, R_SSM_A, R_SSM_DT };

typedef struct sy {
    const sy_preset *ps;
    int mix;
    const lilac_synth_params *p;
    lilac_error *err;
    lilac_synth_plan *plan;
    size_t cap;
} sy;

static bool quantized(const sy *c)
{
    return quantized_mix(c->mix);
}

static void sy_log(const lilac_synth_params *p, lilac_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sy_log(const lilac_synth_params *p, lilac_log_level lvl, const char *fmt, ...)
{
    if (!p->log)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    p->log(p->log_user, lvl, buf);
}

static bool fits(int type, int64_t ne0)
{
    return lilac_dtype_row_bytes(type, ne0) != 0;
}

/* The type of a tensor in the mix (see synth.h). */
static int type_for(const sy *c, const char *name, int role, int il, int64_t ne0)
{
    if (c->mix == MIX_F32 || (role != R_MAT && role != R_EMBD))
        return LILAC_F32;
    int t;
    switch (c->mix) {
    case MIX_BF16:
        t = LILAC_BF16;
        break;
    case MIX_Q8_0:
        t = LILAC_Q8_0;
        break;
    default: /* Q4_K_M */
        if (!strcmp(name, "ssm_alpha.weight") || !strcmp(name, "ssm_beta.weight"))
            t = LILAC_Q8_0;
        else if (!strcmp(name, "attn_v.weight") || !strcmp(name, "ffn_down_shexp.weight") ||
                 !strcmp(name, "output.weight") || (!strcmp(name, "ffn_down_exps.weight") && il % 2 == 0))
            t = LILAC_Q6_K;
        else
            t = LILAC_Q4_K;
        break;
    }
    if (!fits(t, ne0))
        t = fits(LILAC_Q8_0, ne0) ? LILAC_Q8_0 : LILAC_BF16;
    return t;
}

static lilac_status add(sy *c, int il, const char *name, int role, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2)
{
    lilac_synth_plan *pl = c->plan;
    if (pl->n_tensors == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        lilac_synth_tensor *t = realloc(pl->tensors, cap * sizeof *t);
        if (!t)
            return lilac_fail(c->err, LILAC_E_NOMEM, "out of memory");
        pl->tensors = t;
        c->cap = cap;
    }
    lilac_synth_tensor *t = &pl->tensors[pl->n_tensors++];
    memset(t, 0, sizeof *t);
    if (il >= 0)
        snprintf(t->name, sizeof t->name, "blk.%d.%s", il, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role;
    t->type = type_for(c, name, role, il, ne0);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->nbytes = (uint64_t)lilac_dtype_row_bytes(t->type, ne0) * (uint64_t)ne1 * (uint64_t)ne2;
    return LILAC_OK;
}

#define ADD1(name, role, n) add(c, il, name, role, 1, n, 1, 1)
#define ADD2(name, role, n0, n1) add(c, il, name, role, 2, n0, n1, 1)

static lilac_status plan_deltanet(sy *c, int il)
{
    const sy_preset *ps = c->ps;
    int64_t E = ps->n_embd, qk = 2 * (int64_t)ps->nk * ps->dk, vd = (int64_t)ps->nv * ps->dv, ch = qk + vd;
    lilac_status s;
    if ((s = ADD1("ssm_a", R_SSM_A, ps->nv)) || (s = ADD2("ssm_conv1d.weight", R_CONV, ps->K, ch)) ||
        (s = ADD1("ssm_dt.bias", R_SSM_DT, ps->nv)) || (s = ADD2("ssm_alpha.weight", R_MAT, E, ps->nv)) ||
        (s = ADD2("ssm_beta.weight", R_MAT, E, ps->nv)) || (s = ADD2("attn_qkv.weight", R_MAT, E, ch)) ||
        (s = ADD2("attn_gate.weight", R_MAT, E, vd)) || (s = ADD1("ssm_norm.weight", R_NORM, ps->dv)) ||
        (s = ADD2("ssm_out.weight", R_MAT, vd, E)))
        return s;
    return LILAC_OK;
}

static lilac_status plan_attention(sy *c, int il)
{
    const sy_preset *ps = c->ps;
    int64_t E = ps->n_embd, hd = ps->head_dim, q = (int64_t)ps->n_head * hd, kv = (int64_t)ps->n_head_kv * hd;
    lilac_status s;
    if ((s = ADD1("attn_k_norm.weight", R_NORM, hd)) || (s = ADD2("attn_k.weight", R_MAT, E, kv)) ||
        (s = ADD2("attn_output.weight", R_MAT, q, E)) || (s = ADD1("attn_q_norm.weight", R_NORM, hd)) ||
        (s = ADD2("attn_q.weight", R_MAT, E, ps->q35 ? 2 * q : q)) || (s = ADD2("attn_v.weight", R_MAT, E, kv)))
        return s;
    return LILAC_OK;
}

static lilac_status plan_moe(sy *c, int il)
{
    const sy_preset *ps = c->ps;
    int64_t E = ps->n_embd, ff = ps->eff, n = ps->n_expert;
    lilac_status s;
    if ((s = add(c, il, "ffn_down_exps.weight", R_MAT, 3, ff, E, n)) ||
        (s = add(c, il, "ffn_gate_exps.weight", R_MAT, 3, E, ff, n)) ||
        (s = add(c, il, "ffn_up_exps.weight", R_MAT, 3, E, ff, n)) ||
        (s = ADD2("ffn_gate_inp.weight", R_ROUTER, E, n)))
        return s;
    if (!ps->sff)
        return LILAC_OK;
    /* llama-quantize writes the [n_embd, 1] gate as 1-D, the converter as 2-D */
    bool quant = quantized(c);
    if ((s = ADD2("ffn_down_shexp.weight", R_MAT, ps->sff, E)) ||
        (s = ADD2("ffn_gate_shexp.weight", R_MAT, E, ps->sff)) || (s = ADD2("ffn_up_shexp.weight", R_MAT, E, ps->sff)) ||
        (s = add(c, il, "ffn_gate_inp_shexp.weight", R_ROUTER, quant ? 1 : 2, E, 1, 1)))
        return s;
    return LILAC_OK;
}

static int layer_of(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    return atoi(name + 4);
}

/* llama-quantize's order: by layer (globals first), then by name. */
static int cmp_quantize(const void *a, const void *b)
{
    const lilac_synth_tensor *x = a, *y = b;
    int lx = layer_of(x->name), ly = layer_of(y->name);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

static lilac_status plan_tensors_converter(sy *c);

/* The tensors in the order llama.cpp's converter writes them (by the sorted
 * Hugging Face names they come from), or llama-quantize's order. */
static lilac_status plan_tensors(sy *c)
{
    lilac_status s = plan_tensors_converter(c);
    if (!s && quantized(c))
        qsort(c->plan->tensors, c->plan->n_tensors, sizeof *c->plan->tensors, cmp_quantize);
    return s;
}

static lilac_status plan_tensors_converter(sy *c)
{
    const sy_preset *ps = c->ps;
    int64_t E = ps->n_embd;
    int il = -1;
    lilac_status s;
    if ((s = ADD2("output.weight", R_MAT, E, ps->n_vocab)) || (s = ADD2("token_embd.weight", R_EMBD, E, ps->n_vocab)))
        return s;
    for (il = 0; il < ps->n_layer; il++) {
        bool ssm = c->plan->is_ssm[il];
        if ((s = ADD1("attn_norm.weight", R_NORM, E)) || (ssm && (s = plan_deltanet(c, il))) ||
            (s = plan_moe(c, il)) ||
            (s = ADD1(ps->q35 ? "post_attention_norm.weight" : "ffn_norm.weight", R_NORM, E)) ||
            (!ssm && (s = plan_attention(c, il))))
            return s;
    }
    il = -1;
    return ADD1("output_norm.weight", R_NORM, E);
}

/* ---- metadata ---- */

static lilac_status write_hparams(sy *c, gm_out *o)
{
    const sy_preset *ps = c->ps;
    const lilac_synth_plan *pl = c->plan;
    uint64_t one_expert = 0;
    for (size_t i = 0; i < pl->n_tensors; i++) {
        const lilac_synth_tensor *t = &pl->tensors[i];
        uint64_t n = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        one_expert += strstr(t->name, "_exps.") ? n / (uint64_t)t->ne[2] : n;
    }
    char label[64];
    gm_size_label(ps->n_expert, one_expert, label, sizeof label);
    gm_hparams hp = {
        .arch = ps->arch, .q35 = ps->q35, .name = ps->title, .size_label = label,
        .file_type = mix_ftype[c->mix],
        .n_layer = ps->n_layer, .n_ctx = ps->n_ctx, .n_embd = ps->n_embd, .ff = ps->ff,
        .n_head = ps->n_head, .n_head_kv = ps->n_head_kv, .head_dim = ps->head_dim,
        .n_expert = ps->n_expert, .n_used = ps->n_used, .eff = ps->eff, .sff = ps->sff,
        .K = ps->K, .dk = ps->dk, .nk = ps->nk, .nv = ps->nv, .dv = ps->dv, .interval = ps->interval,
        .rope_dims = ps->rope_dims, .has_sections = ps->has_sections, .norm_topk = true,
        .eps = ps->eps, .theta = ps->theta, .is_ssm = pl->is_ssm, .type_keys_last = quantized(c),
    };
    for (int i = 0; i < 4; i++)
        hp.sections[i] = ps->sections[i];
    return gm_write_hparams(o, &hp, c->err);
}

/* GPT-2's byte alphabet: byte token i is the UTF-8 of code point cp(i),
 * the printable bytes first, as byte-level BPE vocabularies order them. */
static void byte_alphabet(uint32_t cps[256])
{
    int n = 0, extra = 0;
    bool printable[256];
    for (int b = 0; b < 256; b++) {
        printable[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (printable[b])
            cps[n++] = (uint32_t)b;
    }
    for (int b = 0; b < 256; b++)
        if (!printable[b])
            cps[n++] = 256u + (uint32_t)extra++;
}

/* tokens with lens for n_vocab ids: the given ones, then "[PAD<id>]". */
typedef struct tok_list {
    const char **strs;
    size_t *lens;
    int32_t *types;
    char *pad_buf;
} tok_list;

static void tok_list_free(tok_list *t)
{
    free(t->strs);
    free(t->lens);
    free(t->types);
    free(t->pad_buf);
}

static lilac_status tok_list_new(tok_list *t, size_t n_vocab, size_t n_given, lilac_error *err)
{
    memset(t, 0, sizeof *t);
    t->strs = calloc(n_vocab, sizeof *t->strs);
    t->lens = calloc(n_vocab, sizeof *t->lens);
    t->types = calloc(n_vocab, sizeof *t->types);
    t->pad_buf = malloc((n_vocab - n_given) * 16 + 1);
    if (!t->strs || !t->lens || !t->types || !t->pad_buf) {
        tok_list_free(t);
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    }
    char *p = t->pad_buf;
    for (size_t i = n_given; i < n_vocab; i++) {
        int k = snprintf(p, 16, "[PAD%zu]", i);
        t->strs[i] = p;
        t->lens[i] = (size_t)k;
        t->types[i] = 5; /* UNUSED */
        p += k;
    }
    return LILAC_OK;
}

static lilac_status write_byte_tokenizer(sy *c, gm_out *o)
{
    static const char *const special[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    size_t n = (size_t)c->ps->n_vocab;
    tok_list tl;
    lilac_status s = tok_list_new(&tl, n, 259, c->err);
    if (s)
        return s;
    char bytes[256][4];
    uint32_t cps[256];
    byte_alphabet(cps);
    for (int i = 0; i < 256; i++) {
        uint32_t cp = cps[i];
        size_t l;
        if (cp < 0x80) {
            bytes[i][0] = (char)cp;
            l = 1;
        } else {
            bytes[i][0] = (char)(0xC0 | (cp >> 6));
            bytes[i][1] = (char)(0x80 | (cp & 0x3F));
            l = 2;
        }
        tl.strs[i] = bytes[i];
        tl.lens[i] = l;
        tl.types[i] = 1; /* NORMAL */
    }
    for (int i = 0; i < 3; i++) {
        tl.strs[256 + i] = special[i];
        tl.lens[256 + i] = strlen(special[i]);
        tl.types[256 + i] = 3; /* CONTROL */
    }
    lilac_error *e = c->err;
    (void)((s = gm_str(o, "tokenizer.ggml.model", "gpt2", e)) ||
           (s = gm_str(o, "tokenizer.ggml.pre", c->ps->q35 ? "qwen35" : "qwen2", e)) ||
           (s = gm_str_arr(o, "tokenizer.ggml.tokens", tl.strs, tl.lens, n, e)) ||
           (s = gm_arr(o, "tokenizer.ggml.token_type", GGUF_VT_I32, tl.types, n, e)) ||
           (s = gm_str_arr(o, "tokenizer.ggml.merges", NULL, NULL, 0, e)) ||
           (s = gm_u32(o, "tokenizer.ggml.eos_token_id", 258, e)) ||
           (s = gm_u32(o, "tokenizer.ggml.padding_token_id", 256, e)) ||
           (s = gm_bool(o, "tokenizer.ggml.add_bos_token", false, e)));
    tok_list_free(&tl);
    return s;
}

/* The tokenizer.* keys of a GGUF file, tokens and token types padded. */
static lilac_status write_gguf_tokenizer(sy *c, gm_out *o, const char *path)
{
    lilac_error *e = c->err;
    gguf_file *f = NULL;
    lilac_status s = gguf_open(path, &f, e);
    if (s)
        return s;
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    const gguf_kv *types = gguf_find_kv(f, "tokenizer.ggml.token_type");
    size_t n = (size_t)c->ps->n_vocab, given = 0;
    tok_list tl = {0};
    if (!toks || toks->type != GGUF_VT_ARRAY || toks->v.arr.type != GGUF_VT_STRING) {
        s = lilac_fail(e, LILAC_E_FORMAT, "%s: no tokenizer: tokenizer.ggml.tokens is missing or not strings", path);
        goto done;
    }
    given = (size_t)toks->v.arr.n;
    if (given > n) {
        s = lilac_fail(e, LILAC_E_ARG, "%s: %zu tokens do not fit the %zu-token vocabulary of preset '%s'", path,
                       given, n, c->ps->name);
        goto done;
    }
    if (types && (types->type != GGUF_VT_ARRAY || types->v.arr.n != given)) {
        s = lilac_fail(e, LILAC_E_FORMAT, "%s: tokenizer.ggml.token_type does not have one integer per token", path);
        goto done;
    }
    if ((s = tok_list_new(&tl, n, given, e)))
        goto done;
    for (size_t i = 0; i < given; i++) {
        int64_t ty = 1;
        if (types && !gguf_arr_i64(types, i, &ty)) {
            s = lilac_fail(e, LILAC_E_FORMAT, "%s: tokenizer.ggml.token_type holds a non-integer", path);
            goto done;
        }
        tl.strs[i] = toks->v.arr.strs[i].ptr;
        tl.lens[i] = (size_t)toks->v.arr.strs[i].len;
        tl.types[i] = (int32_t)ty;
    }
    bool wrote_types = false;
    for (size_t i = 0; i < gguf_n_kv(f) && !s; i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        if (strncmp(kv->key, "tokenizer.", 10) != 0)
            continue;
        if (kv == toks) {
            s = gm_str_arr(o, kv->key, tl.strs, tl.lens, n, e);
            if (!s && !types) { /* always written, as the converter writes it */
                s = gm_arr(o, "tokenizer.ggml.token_type", GGUF_VT_I32, tl.types, n, e);
                wrote_types = true;
            }
        } else if (kv == types) {
            if (!wrote_types)
                s = gm_arr(o, kv->key, GGUF_VT_I32, tl.types, n, e);
        } else {
            s = gm_copy_kv(o, kv, e);
        }
    }
done:
    tok_list_free(&tl);
    gguf_close(f);
    return s;
}

/* tokenizer.json (or a directory holding one), as the converter writes it. */
static lilac_status write_json_tokenizer(sy *c, gm_out *o, const char *path, bool is_dir)
{
    char json_path[4200], dir[4096], cfg_path[4200];
    if (is_dir) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(json_path, sizeof json_path, "%s/tokenizer.json", path);
        struct stat sb;
        if (stat(json_path, &sb) != 0)
            return lilac_fail(c->err, LILAC_E_IO, "%s: no tokenizer.json in this directory", path);
    } else {
        snprintf(json_path, sizeof json_path, "%s", path);
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir)
            *slash = 0;
        else if (slash)
            dir[1] = 0;
        else
            snprintf(dir, sizeof dir, ".");
    }
    /* config.json beside it, if any: the *_token_id fallbacks */
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    json_t *root = json_load_file(cfg_path, 0, NULL);
    json_t *cfg = json_is_object(json_object_get(root, "text_config")) ? json_object_get(root, "text_config") : root;
    lilac_status s = gm_write_tokenizer_json(o, json_path, dir, cfg, root, c->ps->n_vocab, true, c->err);
    json_decref(root);
    return s;
}

static lilac_status write_tokenizer(sy *c, gm_out *o)
{
    const char *path = c->p->tokenizer;
    if (!path || !*path) {
        if (o->w)
            sy_log(c->p, LILAC_LOG_INFO,
                   "no tokenizer given: writing a byte-level vocabulary (256 byte tokens, <|endoftext|>, "
                   "<|im_start|>, <|im_end|>, padding to %d; no merges, no chat template)",
                   c->ps->n_vocab);
        return write_byte_tokenizer(c, o);
    }
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lilac_fail(c->err, LILAC_E_IO, "%s: cannot read the tokenizer: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return write_json_tokenizer(c, o, path, true);
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return lilac_fail(c->err, LILAC_E_IO, "%s: cannot read the tokenizer: %s", path, strerror(errno));
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && !memcmp(magic, "GGUF", 4))
        return write_gguf_tokenizer(c, o, path);
    return write_json_tokenizer(c, o, path, false);
}

static lilac_status write_metadata(sy *c, gm_out *o)
{
    lilac_status s;
    if ((s = write_hparams(c, o)) || (s = write_tokenizer(c, o)))
        return s;
    return quantized(c) ? gm_write_type_keys(o, mix_ftype[c->mix], c->err) : LILAC_OK;
}

/* ---- setup ---- */

static lilac_status resolve(const lilac_synth_params *p, sy *c, lilac_error *err)
{
    memset(c, 0, sizeof *c);
    c->p = p;
    c->err = err;
    if (!p || !p->preset || !p->type)
        return lilac_fail(err, LILAC_E_ARG, "synth: a preset and a type are needed");
    char known[256];
    size_t o = 0;
    for (size_t i = 0; i < N_PRESETS; i++) {
        o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "", presets[i].name);
        if (!strcmp(p->preset, presets[i].name))
            c->ps = &presets[i];
    }
    if (!c->ps)
        return lilac_fail(err, LILAC_E_ARG, "synth: unknown preset '%s' (known: %s)", p->preset, known);
    c->mix = -1;
    for (int i = 0; i < N_MIXES; i++) {
        const char *a = p->type, *b = mix_names[i];
        while (*a && *b && (*a | 0x20) == (*b | 0x20))
            a++, b++;
        if (!*a && !*b)
            c->mix = i;
    }
    if (c->mix < 0)
        return lilac_fail(err, LILAC_E_ARG, "synth: unknown type '%s' (known: F32, BF16, Q8_0, Q4_K_M)", p->type);
    return LILAC_OK;
}

void lilac_synth_plan_free(lilac_synth_plan *plan)
{
    if (!plan)
        return;
    free(plan->tensors);
    free(plan);
}

/* The plan; the metadata goes through o (a writer's, or only counted). */
static lilac_status make_plan(sy *c, gm_out *o)
{
    const sy_preset *ps = c->ps;
    lilac_synth_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return lilac_fail(c->err, LILAC_E_NOMEM, "out of memory");
    c->plan = pl;
    pl->preset = ps->name;
    pl->arch = ps->arch;
    pl->mix = mix_names[c->mix];
    pl->n_layer = ps->n_layer;
    pl->n_vocab = ps->n_vocab;
    for (int i = 0; i < ps->n_layer; i++)
        pl->is_ssm[i] = ps->q35 && (i + 1) % ps->interval != 0;
    lilac_status s;
    if ((s = plan_tensors(c)) || (s = write_metadata(c, o)))
        return s;
    uint64_t info = 0, off = 0;
    for (size_t i = 0; i < pl->n_tensors; i++) {
        const lilac_synth_tensor *t = &pl->tensors[i];
        info += gm_tensor_info_bytes(t->name, t->n_dims);
        pl->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    pl->n_kv = o->n_kv;
    pl->header_bytes = gm_header_bytes(o, info);
    for (size_t i = 0; i < pl->n_tensors; i++) {
        pl->tensors[i].offset = pl->header_bytes + off;
        off = (off + pl->tensors[i].nbytes + 31) / 32 * 32;
    }
    pl->data_bytes = off;
    pl->file_bytes = pl->header_bytes + off;
    return LILAC_OK;
}

lilac_status lilac_synth_plan_new(const lilac_synth_params *p, lilac_synth_plan **out, lilac_error *err)
{
    *out = NULL;
    sy c;
    lilac_status s = resolve(p, &c, err);
    if (s)
        return s;
    gm_out o = {0};
    if ((s = make_plan(&c, &o))) {
        lilac_synth_plan_free(c.plan);
        return s;
    }
    *out = c.plan;
    return LILAC_OK;
}

/* ---- values ---- */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static inline uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

/* A normal-ish value (mean 0, deviation 1, within +-3.47): the sum of four
 * 16-bit uniforms of one word (Irwin-Hall). */
static inline float rng_normal(rng *r)
{
    uint64_t w = rng_next(r);
    uint32_t sum = (uint32_t)(w & 0xffff) + (uint32_t)((w >> 16) & 0xffff) + (uint32_t)((w >> 32) & 0xffff) +
                   (uint32_t)(w >> 48);
    return ((float)sum + 2.0f - 131072.0f) * (1.7320508f / 65536.0f);
}

/* float -> IEEE half, round to nearest even (finite inputs). */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffffu;
    if (exp >= 31)
        return (uint16_t)(sign | 0x7bffu); /* clamp to the largest finite */
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        int shift = 14 - exp;
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    if ((h & 0x7fffu) >= 0x7c00u)
        h = 0x7bffu;
    return (uint16_t)(sign | h);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The deviation of a matrix's (or the embedding's, or a router's) values. */
static float tensor_sigma(const lilac_synth_tensor *t)
{
    switch (t->role) {
    case R_EMBD:
    case R_ROUTER:
        return 0.02f;
    case R_CONV:
        return 0.5f / sqrtf((float)t->ne[0]);
    case R_SSM_DT:
        return 0.5f;
    default:
        return 0.5f / sqrtf((float)t->ne[0]);
    }
}

static inline float float_value(int role, float sigma, rng *r)
{
    float z = rng_normal(r);
    switch (role) {
    case R_NORM:
        return 1.0f + 0.02f * z;
    case R_SSM_A:
        return -expf(0.5f * z);
    default:
        return sigma * z;
    }
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Fill n bytes (whole elements or blocks of t's type) with t's values. */
static void fill(const lilac_synth_tensor *t, float sigma, rng *r, uint8_t *buf, size_t n)
{
    switch (t->type) {
    case LILAC_F32:
        for (size_t i = 0; i < n; i += 4) {
            float v = float_value(t->role, sigma, r);
            memcpy(buf + i, &v, 4);
        }
        return;
    case LILAC_BF16:
        for (size_t i = 0; i < n; i += 2)
            put16(buf + i, f32_to_bf16(float_value(t->role, sigma, r)));
        return;
    default:
        break;
    }
    /* Block types: random quants (whole words; the buffer has slack), then
     * the scales. */
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = rng_next(r);
        memcpy(buf + i, &w, 8);
    }
    const lilac_dtype_info *di = lilac_dtype_get(t->type);
    size_t bs = di->size;
    switch (t->type) {
    case LILAC_Q8_0: { /* d (fp16) at 0, 32 int8 quants: deviation 73.9 d */
        uint16_t d = f32_to_f16(sigma / 73.9f);
        for (size_t b = 0; b < n; b += bs)
            put16(buf + b, d);
        return;
    }
    case LILAC_Q4_K: { /* d, dmin, 12 bytes of 6-bit scales/mins; w = d*8*q - dmin*60, q in 0..15 */
        static const uint8_t sc[12] = {8, 8, 8, 8, 252, 252, 252, 252, 200, 200, 200, 200};
        uint16_t d = f32_to_f16(sigma / 36.88f);
        for (size_t b = 0; b < n; b += bs) {
            put16(buf + b, d);
            put16(buf + b + 2, d);
            memcpy(buf + b + 4, sc, 12);
        }
        return;
    }
    case LILAC_Q5_K: { /* as Q4_K with q in 0..31: w = d*4*q - dmin*62 */
        static const uint8_t sc[12] = {4, 4, 4, 4, 254, 254, 254, 254, 228, 228, 228, 228};
        uint16_t d = f32_to_f16(sigma / 36.93f);
        for (size_t b = 0; b < n; b += bs) {
            put16(buf + b, d);
            put16(buf + b + 2, d);
            memcpy(buf + b + 4, sc, 12);
        }
        return;
    }
    case LILAC_Q6_K: { /* ql[128], qh[64], int8 scales[16] at 192, d at 208; w = d*4*(q - 32) */
        uint16_t d = f32_to_f16(sigma / 73.9f);
        for (size_t b = 0; b < n; b += bs) {
            memset(buf + b + 192, 4, 16);
            put16(buf + b + 208, d);
        }
        return;
    }
    default:
        return; /* not a type synth writes */
    }
}

/* ---- writing ---- */

#define SY_BUF (4u << 20)

static void human(double bytes, char *buf, size_t size)
{
    snprintf(buf, size, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

static lilac_status check_space(const char *out_path, uint64_t need, lilac_error *err)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out_path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir)
        *slash = 0;
    else if (slash)
        dir[1] = 0;
    else
        snprintf(dir, sizeof dir, ".");
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return lilac_fail(err, LILAC_E_IO, "%s: cannot write there: directory '%s': %s", out_path, dir,
                          strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return lilac_fail(err, LILAC_E_IO, "%s: cannot write there: '%s' is not a directory", out_path, dir);
    struct statvfs vs;
    if (statvfs(dir, &vs) != 0)
        return LILAC_OK; /* unknown: let the writes tell */
    uint64_t avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
    if (avail < need) {
        char a[32], b[32];
        human((double)need, a, sizeof a);
        human((double)avail, b, sizeof b);
        return lilac_fail(err, LILAC_E_IO, "%s: not enough disk space: the file needs %s, '%s' has %s free",
                          out_path, a, dir, b);
    }
    return LILAC_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

lilac_status lilac_synth_write(const lilac_synth_params *p, const char *out_path, lilac_synth_plan **plan_out,
                               lilac_error *err)
{
    if (plan_out)
        *plan_out = NULL;
    if (!out_path || !*out_path)
        return lilac_fail(err, LILAC_E_ARG, "synth: no output file given");
    sy c;
    lilac_status s = resolve(p, &c, err);
    if (s)
        return s;
    /* Plan first (counting only) to check the disk before creating anything. */
    lilac_synth_plan *plan = NULL;
    if ((s = lilac_synth_plan_new(p, &plan, err)))
        return s;
    if ((s = check_space(out_path, plan->file_bytes, err))) {
        lilac_synth_plan_free(plan);
        return s;
    }
    uint64_t planned = plan->file_bytes;
    lilac_synth_plan_free(plan);

    gguf_writer *w = NULL;
    uint8_t *buf = NULL;
    gm_out o = {0};
    if ((s = gguf_writer_open(out_path, &w, err)))
        return s;
    o.w = w;
    if ((s = make_plan(&c, &o)))
        goto done;
    lilac_synth_plan *pl = c.plan;
    if (pl->file_bytes != planned) {
        s = lilac_fail(err, LILAC_E_INTERNAL, "synth: the plan changed between two readings of the tokenizer");
        goto done;
    }
    for (size_t i = 0; i < pl->n_tensors && !s; i++)
        s = gguf_writer_add_tensor(w, pl->tensors[i].name, pl->tensors[i].type, pl->tensors[i].n_dims,
                                   pl->tensors[i].ne, err);
    if (s || (s = gguf_writer_begin_data(w, err)))
        goto done;
    buf = malloc(SY_BUF + 16);
    if (!buf) {
        s = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        goto done;
    }
    double t0 = now_s();
    uint64_t done_bytes = 0;
    int last_pct = -1;
    for (size_t i = 0; i < pl->n_tensors; i++) {
        const lilac_synth_tensor *t = &pl->tensors[i];
        const lilac_dtype_info *di = lilac_dtype_get(t->type);
        size_t unit = di->size, chunk = SY_BUF / unit * unit;
        float sigma = tensor_sigma(t);
        rng r;
        rng_seed(&r, p->seed, i + 1);
        for (uint64_t left = t->nbytes; left > 0;) {
            if (p->interrupt && *p->interrupt) {
                s = lilac_fail(err, LILAC_E_IO, "%s: interrupted; no file written", out_path);
                goto done;
            }
            size_t k = left < chunk ? (size_t)left : chunk;
            fill(t, sigma, &r, buf, k);
            if ((s = gguf_writer_write(w, buf, k, err)))
                goto done;
            left -= k;
            done_bytes += k;
            if (p->progress) {
                int pct = (int)(100.0 * (double)done_bytes / (double)pl->data_bytes);
                if (pct != last_pct) {
                    last_pct = pct;
                    fprintf(stderr, "\rsynth: %3d%%  %.2f / %.2f GiB", pct, done_bytes / 1073741824.0,
                            pl->data_bytes / 1073741824.0);
                    fflush(stderr);
                }
            }
        }
    }
    if (p->progress)
        fprintf(stderr, "\rsynth: 100%%  %.2f / %.2f GiB\n", pl->data_bytes / 1073741824.0,
                pl->data_bytes / 1073741824.0);
    if ((s = gguf_writer_finish(w, err)))
        goto done;
    struct stat sb;
    if (stat(out_path, &sb) != 0 || (uint64_t)sb.st_size != pl->file_bytes) {
        long long have = stat(out_path, &sb) == 0 ? (long long)sb.st_size : -1;
        remove(out_path);
        s = lilac_fail(err, LILAC_E_INTERNAL, "%s: the file has %lld bytes, the plan said %llu; removed", out_path,
                       have, (unsigned long long)pl->file_bytes);
        goto done;
    }
    sy_log(p, LILAC_LOG_INFO, "wrote %zu tensors to %s in %.1f s", pl->n_tensors, out_path, now_s() - t0);
done:
    if (s && p->progress && buf)
        fputc('\n', stderr);
    free(buf);
    gguf_writer_free(w); /* removes OUT.tmp unless finished */
    if (!s && plan_out)
        *plan_out = c.plan;
    else
        lilac_synth_plan_free(c.plan);
    return s;
}
