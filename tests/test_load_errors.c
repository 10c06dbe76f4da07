/* test_load_errors: broken model files and checkpoints, made here from the
 * fixture models (truncated, wrong magic, unknown metadata type, tensor out
 * of the file, missing tensor, wrong shape, unsupported architecture,
 * malformed config.json, missing or truncated shards, an index that lies),
 * each opened with lilac_model_open: every one must fail with a status, a
 * single-line message naming the file and the problem, no crash and no leak
 * (LeakSanitizer checks the last). Then the argument errors of
 * lilac_seq_new / lilac_seq_eval on a good model.
 *
 *   test_load_errors [-v]     -v also prints the messages */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

#include "lilac.h"
#include "testutil.h"

static int verbose;
static char tmpdir[256];

/* ---- files -------------------------------------------------------------- */

static void rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            char sub[4096];
            while ((e = readdir(d)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                    continue;
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                rm_tree(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* tmpdir/name (static buffers, used round robin). */
static const char *tmp_path(const char *name)
{
    static char bufs[8][4096];
    static int k;
    char *p = bufs[k++ % 8];
    snprintf(p, 4096, "%s/%s", tmpdir, name);
    return p;
}

/* Write a file, replacing whatever is at path (a symlink into the
 * read-only fixtures included: it is unlinked, never written through). */
static int put(const char *path, const void *data, size_t size)
{
    unlink(path);
    int rc = tu_write_file(path, data, size);
    CHECKF(rc == 0, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* ---- the check ---------------------------------------------------------- */

#define ANY_STATUS (-1)

/* lilac_model_open(path) must fail (with status want unless ANY_STATUS),
 * leave *out NULL, and give one line naming `file` and holding each of the
 * phrases (NULL ends the list). */
static void expect_fail(const char *label, const char *path, int want, const char *file, const char *p1,
                        const char *p2, const char *p3)
{
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = 1;
    lilac_model *m = (lilac_model *)(uintptr_t)1;
    lilac_error err;
    memset(&err, 0, sizeof err);
    snprintf(err.msg, sizeof err.msg, "(no message)");
    lilac_status st = lilac_model_open(path, &mp, &m, &err);
    CHECKF(st != LILAC_OK, "%s: %s opened although it is broken", label, path);
    if (st == LILAC_OK) {
        lilac_model_free(m);
        return;
    }
    CHECKF(m == NULL, "%s: *out not cleared on failure", label);
    CHECKF(err.status == st, "%s: err.status %s but returned %s", label, lilac_status_name(err.status),
           lilac_status_name(st));
    if (want != ANY_STATUS)
        CHECKF(st == (lilac_status)want, "%s: status '%s', expected '%s': %s", label, lilac_status_name(st),
               lilac_status_name((lilac_status)want), err.msg);
    CHECKF(memchr(err.msg, '\0', sizeof err.msg) != NULL, "%s: message not terminated", label);
    CHECKF(err.msg[0] != '\0', "%s: empty message", label);
    CHECKF(strchr(err.msg, '\n') == NULL && strchr(err.msg, '\r') == NULL, "%s: message is not one line: %s",
           label, err.msg);
    const char *at = strstr(err.msg, file);
    CHECKF(at != NULL, "%s: message does not name %s: %s", label, file, err.msg);
    if (at) /* "FILE: FILE: ..." is noise */
        CHECKF(strstr(at + strlen(file), file) == NULL, "%s: message names %s twice: %s", label, file, err.msg);
    const char *ph[3] = {p1, p2, p3};
    for (int i = 0; i < 3; i++)
        if (ph[i])
            CHECKF(strstr(err.msg, ph[i]) != NULL, "%s: message lacks '%s': %s", label, ph[i], err.msg);
    if (verbose)
        printf("  %-34s [%s] %s\n", label, lilac_status_name(st), err.msg);
}

/* The control: a copy that should load must load. */
static void expect_ok(const char *label, const char *path)
{
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = 1;
    lilac_model *m = NULL;
    lilac_error err;
    memset(&err, 0, sizeof err);
    lilac_status st = lilac_model_open(path, &mp, &m, &err);
    CHECKF(st == LILAC_OK && m != NULL, "%s: control copy %s does not load: %s", label, path, err.msg);
    lilac_model_free(m);
}

/* ---- GGUF --------------------------------------------------------------- */

/* Where things are in a (valid) GGUF image, found by walking it. */
typedef struct layout {
    size_t first_kv_type;     /* the u32 value type of the first kv */
    size_t arch_key;          /* key bytes of general.architecture */
    size_t arch_val, arch_len; /* its string value's bytes */
    size_t block_count_key;   /* key bytes of ARCH.block_count */
    size_t kv_end, ti_end, data_start;
    size_t attn_norm_name;    /* name bytes of blk.0.attn_norm.weight */
    size_t out_norm_ne0;      /* the u64 ne[0] of output_norm.weight */
    size_t out_norm_type;     /* its u32 type */
    uint64_t out_norm_ne0_val;
    size_t out_type;          /* the u32 type of output.weight */
    size_t block_count_val;   /* the u32 value of ARCH.block_count */
    size_t expert_used_val;   /* the u32 value of ARCH.expert_used_count */
} layout;

static uint64_t rd(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void wr(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* 0 on success; the fixture is trusted but the walk still stays in bounds. */
static int walk(const uint8_t *b, size_t size, layout *L)
{
    static const uint8_t vsize[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    memset(L, 0, sizeof *L);
    size_t p = 24;
    if (size < p || memcmp(b, "GGUF", 4) != 0)
        return -1;
    uint64_t n_t = rd(b + 8, 8), n_kv = rd(b + 16, 8);
#define NEED(n)                                                                                            \
    do {                                                                                                   \
        if ((uint64_t)(n) > size - p)                                                                      \
            return -1;                                                                                     \
    } while (0)
    for (uint64_t i = 0; i < n_kv; i++) {
        NEED(8);
        uint64_t kl = rd(b + p, 8);
        p += 8;
        NEED(kl + 4);
        size_t key = p;
        p += kl;
        uint32_t t = (uint32_t)rd(b + p, 4);
        if (i == 0)
            L->first_kv_type = p;
        p += 4;
        if (kl == 20 && !memcmp(b + key, "general.architecture", 20))
            L->arch_key = key;
        if (kl > 12 && !memcmp(b + key + kl - 12, ".block_count", 12) && t == 4) {
            L->block_count_key = key;
            L->block_count_val = p;
        }
        if (kl > 18 && !memcmp(b + key + kl - 18, ".expert_used_count", 18) && t == 4)
            L->expert_used_val = p;
        if (t == 8) {
            NEED(8);
            uint64_t sl = rd(b + p, 8);
            p += 8;
            NEED(sl);
            if (key == L->arch_key && L->arch_key) {
                L->arch_val = p;
                L->arch_len = (size_t)sl;
            }
            p += sl;
        } else if (t == 9) {
            NEED(12);
            uint32_t et = (uint32_t)rd(b + p, 4);
            uint64_t n = rd(b + p + 4, 8);
            p += 12;
            if (et == 8) {
                for (uint64_t j = 0; j < n; j++) {
                    NEED(8);
                    uint64_t sl = rd(b + p, 8);
                    p += 8;
                    NEED(sl);
                    p += sl;
                }
            } else if (et < 13 && vsize[et]) {
                NEED(n * vsize[et]);
                p += n * vsize[et];
            } else {
                return -1;
            }
        } else if (t < 13 && vsize[t]) {
            NEED(vsize[t]);
            p += vsize[t];
        } else {
            return -1;
        }
    }
    L->kv_end = p;
    for (uint64_t i = 0; i < n_t; i++) {
        NEED(8);
        uint64_t nl = rd(b + p, 8);
        p += 8;
        NEED(nl + 4);
        size_t name = p;
        p += nl;
        uint32_t nd = (uint32_t)rd(b + p, 4);
        p += 4;
        NEED(8 * (uint64_t)nd + 12);
        if (nl == 22 && !memcmp(b + name, "blk.0.attn_norm.weight", 22))
            L->attn_norm_name = name;
        if (nl == 18 && !memcmp(b + name, "output_norm.weight", 18)) {
            L->out_norm_ne0 = p;
            L->out_norm_ne0_val = rd(b + p, 8);
            L->out_norm_type = p + 8 * nd;
        }
        if (nl == 13 && !memcmp(b + name, "output.weight", 13))
            L->out_type = p + 8 * nd;
        p += 8 * (size_t)nd + 12;
    }
#undef NEED
    L->ti_end = p;
    L->data_start = (p + 31) / 32 * 32; /* neither fixture sets general.alignment */
    return L->arch_key && L->arch_val && L->block_count_key && L->attn_norm_name && L->out_norm_ne0 &&
                   L->out_type && L->expert_used_val
               ? 0
               : -1;
}

/* Write a variant: the first n bytes of img, with patch applied to a copy. */
typedef void (*patch_fn)(uint8_t *img, const layout *L);

static const char *variant(const char *model, const char *what, const uint8_t *img, size_t n, patch_fn patch,
                           const layout *L)
{
    char name[256];
    snprintf(name, sizeof name, "%s-%s.gguf", model, what);
    const char *path = tmp_path(name);
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) {
        CHECK(copy != NULL);
        return path;
    }
    memcpy(copy, img, n);
    if (patch)
        patch(copy, L);
    put(path, copy, n);
    free(copy);
    return path;
}

static void p_magic(uint8_t *b, const layout *L)
{
    (void)L;
    memcpy(b, "GGML", 4);
}
static void p_version(uint8_t *b, const layout *L)
{
    (void)L;
    wr(b + 4, 7, 4);
}
static void p_kv_type(uint8_t *b, const layout *L) { wr(b + L->first_kv_type, 99, 4); }
static void p_rename_tensor(uint8_t *b, const layout *L) { b[L->attn_norm_name + 21] = 'X'; } /* ...weighX */
static void p_arch(uint8_t *b, const layout *L)
{
    /* qwen35moe -> qwen99moe, qwen3moe -> qwen9moe: same length */
    for (size_t i = 0; i < L->arch_len; i++)
        if (b[L->arch_val + i] >= '0' && b[L->arch_val + i] <= '9')
            b[L->arch_val + i] = '9';
}
static void p_arch_key(uint8_t *b, const layout *L) { b[L->arch_key + 19] = 'X'; } /* general.architecturX */
static void p_block_count_key(uint8_t *b, const layout *L)
{
    /* ARCH.block_count -> ARCH.block_counX */
    size_t e = L->block_count_key;
    while (memcmp(b + e, ".block_count", 12) != 0)
        e++;
    b[e + 11] = 'X';
}
static void p_shape(uint8_t *b, const layout *L) { wr(b + L->out_norm_ne0, L->out_norm_ne0_val / 2, 8); }
static void p_ttype(uint8_t *b, const layout *L) { wr(b + L->out_norm_type, 99, 4); }
static void p_vec_type(uint8_t *b, const layout *L) { wr(b + L->out_norm_type, 8, 4); } /* F32 -> Q8_0 */
static void p_nan(uint8_t *b, const layout *L)
{
    uint64_t off = rd(b + L->out_norm_type + 4, 8);
    wr(b + L->data_start + off + 4 * 5, 0x7fc00000u, 4); /* output_norm.weight[5] = NaN */
}
static void p_mat_type(uint8_t *b, const layout *L) { wr(b + L->out_type, 24, 4); } /* output.weight BF16 -> I8 */
static void p_layers(uint8_t *b, const layout *L) { wr(b + L->block_count_val, 600, 4); }
static void p_experts_used(uint8_t *b, const layout *L) { wr(b + L->expert_used_val, 9, 4); }
static void p_offset(uint8_t *b, const layout *L)
{
    /* output_norm.weight's offset pushed 1 GiB past the data */
    size_t off = L->out_norm_type + 4;
    wr(b + off, rd(b + off, 8) + ((uint64_t)1 << 30), 8);
}

static void gguf_cases(const char *fx, const char *model)
{
    char src[4096];
    snprintf(src, sizeof src, "%s/%s/gguf/model-bf16.gguf", fx, model);
    size_t n = 0;
    uint8_t *img = tu_read_file(src, &n);
    CHECKF(img != NULL, "cannot read %s", src);
    if (!img)
        return;
    layout L;
    int w = walk(img, n, &L);
    CHECKF(w == 0, "%s: cannot find the fields to corrupt", src);
    if (w) {
        free(img);
        return;
    }
    char label[128];
    const char *p;
#define LABEL(s) (snprintf(label, sizeof label, "%s %s", model, s), label)

    p = variant(model, "copy", img, n, NULL, &L);
    expect_ok(LABEL("unmodified copy"), p);

    /* truncations: every stage of the file */
    size_t cuts[] = {10, 20, L.kv_end / 2, L.kv_end + 7, (L.kv_end + L.ti_end) / 2, L.ti_end - 3};
    const char *stage[] = {"10 bytes", "mid-header", "mid-metadata", "just after metadata", "mid-tensor-infos",
                           "end of tensor infos"};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "cut%zu", cuts[i]);
        p = variant(model, what, img, cuts[i], NULL, &L);
        char l2[96];
        snprintf(l2, sizeof l2, "truncated %s", stage[i]);
        expect_fail(LABEL(l2), p, LILAC_E_FORMAT, p, "truncated", NULL, NULL);
    }
    /* cut in the data: a tensor runs out of the file */
    size_t dcuts[] = {L.data_start, L.data_start + (n - L.data_start) / 2, n - 1};
    for (size_t i = 0; i < sizeof dcuts / sizeof dcuts[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "cut%zu", dcuts[i]);
        p = variant(model, what, img, dcuts[i], NULL, &L);
        expect_fail(LABEL("truncated mid-data"), p, LILAC_E_FORMAT, p, "extends past the end of the file",
                    "tensor '", NULL);
    }
    p = variant(model, "cut-last", img, n - 1, NULL, &L);
    expect_fail(LABEL("last byte missing"), p, LILAC_E_FORMAT, p, "'output_norm.weight'", "past the end", NULL);
    p = variant(model, "far-offset", img, n, p_offset, &L);
    expect_fail(LABEL("tensor offset out of the file"), p, LILAC_E_FORMAT, p, "'output_norm.weight'",
                "past the end", NULL);

    p = variant(model, "magic", img, n, p_magic, &L);
    expect_fail(LABEL("wrong magic"), p, LILAC_E_FORMAT, p, "not a GGUF file", "GGML", NULL);
    p = variant(model, "version", img, n, p_version, &L);
    expect_fail(LABEL("unknown version"), p, ANY_STATUS, p, "version 7", NULL, NULL);
    p = variant(model, "kvtype", img, n, p_kv_type, &L);
    expect_fail(LABEL("unknown metadata value type"), p, ANY_STATUS, p, "unknown metadata value type 99",
                "general.architecture", NULL);
    p = variant(model, "ttype", img, n, p_ttype, &L);
    expect_fail(LABEL("unknown tensor type"), p, ANY_STATUS, p, "'output_norm.weight'", "unknown type 99", NULL);
    p = variant(model, "renamed", img, n, p_rename_tensor, &L);
    expect_fail(LABEL("missing tensor"), p, LILAC_E_FORMAT, p, "missing tensor", "'blk.0.attn_norm.weight'",
                NULL);
    p = variant(model, "arch", img, n, p_arch, &L);
    expect_fail(LABEL("unsupported architecture"), p, LILAC_E_UNSUPPORTED, p, "unsupported architecture",
                strcmp(model, "tiny-qwen35moe") == 0 ? "'qwen99moe'" : "'qwen9moe'", NULL);
    p = variant(model, "no-arch", img, n, p_arch_key, &L);
    expect_fail(LABEL("no general.architecture"), p, LILAC_E_FORMAT, p, "general.architecture", "missing",
                NULL);
    p = variant(model, "no-blocks", img, n, p_block_count_key, &L);
    expect_fail(LABEL("missing hyper-parameter"), p, LILAC_E_FORMAT, p, "missing metadata", ".block_count'",
                NULL);
    p = variant(model, "shape", img, n, p_shape, &L);
    char have[32], need[32];
    snprintf(have, sizeof have, "[%llu]", (unsigned long long)(L.out_norm_ne0_val / 2));
    snprintf(need, sizeof need, "[%llu]", (unsigned long long)L.out_norm_ne0_val);
    expect_fail(LABEL("wrong shape"), p, LILAC_E_FORMAT, p, "'output_norm.weight'", have, need);
    p = variant(model, "vec-type", img, n, p_vec_type, &L);
    expect_fail(LABEL("norm weight quantized"), p, LILAC_E_UNSUPPORTED, p, "'output_norm.weight'", "Q8_0",
                "F32, F16 or BF16");
    p = variant(model, "nan", img, n, p_nan, &L);
    expect_fail(LABEL("NaN in a norm weight"), p, LILAC_E_FORMAT, p, "'output_norm.weight'", "non-finite",
                "at 5");
    p = variant(model, "mat-type", img, n, p_mat_type, &L);
    expect_fail(LABEL("output.weight of type I8"), p, LILAC_E_UNSUPPORTED, p, "'output.weight'", "I8", NULL);
    p = variant(model, "layers", img, n, p_layers, &L);
    expect_fail(LABEL("600 layers"), p, LILAC_E_FORMAT, p, "600 layers", NULL, NULL);
    p = variant(model, "experts-used", img, n, p_experts_used, &L);
    expect_fail(LABEL("9 of 8 experts used"), p, LILAC_E_FORMAT, p, "9 used per token", NULL, NULL);
    p = variant(model, "empty", img, 0, NULL, &L);
    expect_fail(LABEL("empty file"), p, LILAC_E_FORMAT, p, "truncated", NULL, NULL);
    /* A safetensors shard given where a model is expected. */
    snprintf(src, sizeof src, "%s/%s/hf/model-00001-of-00002.safetensors", fx, model);
    expect_fail(LABEL("safetensors file as a model"), src, LILAC_E_FORMAT, src, "not a GGUF file", NULL, NULL);
#undef LABEL
    free(img);
}

/* ---- Hugging Face checkpoints ------------------------------------------- */

#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"
#define IDX "model.safetensors.index.json"

/* A checkpoint dir tmp/hf-MODEL-CASE whose files are symlinks to the
 * fixture's (the case then replaces some). */
static const char *hf_dir(const char *fx, const char *model, const char *cs)
{
    static char dir[2048];
    snprintf(dir, sizeof dir, "%s/hf-%s-%s", tmpdir, model, cs);
    CHECKF(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
    const char *names[] = {"config.json", IDX, S1, S2};
    for (size_t i = 0; i < 4; i++) {
        char from[4096], to[4096];
        snprintf(from, sizeof from, "%s/%s/hf/%s", fx, model, names[i]);
        snprintf(to, sizeof to, "%s/%s", dir, names[i]);
        CHECKF(symlink(from, to) == 0, "symlink %s: %s", to, strerror(errno));
    }
    return dir;
}

static const char *in_dir(const char *dir, const char *name)
{
    static char bufs[4][4096];
    static int k;
    char *p = bufs[k++ % 4];
    snprintf(p, 4096, "%s/%s", dir, name);
    return p;
}

static void put_json(const char *path, json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2));
    CHECK(s != NULL);
    if (s)
        put(path, s, strlen(s));
    free(s);
}

/* config.json of the fixture with key set to v (NULL: deleted). */
static void put_config(const char *fx, const char *model, const char *dir, const char *key, json_t *v)
{
    char src[4096];
    snprintf(src, sizeof src, "%s/%s/hf/config.json", fx, model);
    json_error_t je;
    json_t *cfg = json_load_file(src, 0, &je);
    CHECKF(cfg != NULL, "%s: %s", src, je.text);
    if (!cfg) {
        json_decref(v);
        return;
    }
    if (v)
        json_object_set_new(cfg, key, v);
    else
        json_object_del(cfg, key);
    put_json(in_dir(dir, "config.json"), cfg);
    json_decref(cfg);
}

/* Both shards merged into one model.safetensors, leaving out tensor `drop`
 * (NULL: none). The data sections are copied unchanged; the second shard's
 * offsets move by the first's data size. The header is padded with spaces
 * to a multiple of 8 bytes, as safetensors writes it. */
static void write_single(const char *fx, const char *model, const char *dir, const char *drop)
{
    json_t *hdr = json_object();
    uint8_t *data = NULL;
    size_t data_n = 0;
    int ok = 1;
    for (int s = 0; s < 2 && ok; s++) {
        char src[4096];
        snprintf(src, sizeof src, "%s/%s/hf/%s", fx, model, s ? S2 : S1);
        size_t n = 0;
        uint8_t *img = tu_read_file(src, &n);
        uint64_t hl = img && n >= 8 ? rd(img, 8) : 0;
        ok = img && hl <= n - 8;
        CHECKF(ok, "cannot read %s", src);
        json_error_t je;
        json_t *h = ok ? json_loadb((const char *)img + 8, (size_t)hl, 0, &je) : NULL;
        ok = ok && h;
        const char *key;
        json_t *v;
        if (ok)
            json_object_foreach(h, key, v) {
                if (!strcmp(key, "__metadata__") || (drop && !strcmp(key, drop)))
                    continue;
                json_t *e = json_deep_copy(v);
                json_t *offs = json_object_get(e, "data_offsets");
                for (size_t k = 0; k < 2; k++)
                    json_array_set_new(offs, k,
                                       json_integer(json_integer_value(json_array_get(offs, k)) +
                                                    (json_int_t)data_n));
                json_object_set_new(hdr, key, e);
            }
        json_decref(h);
        if (ok) {
            size_t dn = n - 8 - (size_t)hl;
            uint8_t *nd = realloc(data, data_n + dn);
            ok = nd != NULL;
            if (ok) {
                memcpy(nd + data_n, img + 8 + hl, dn);
                data = nd;
                data_n += dn;
            }
        }
        free(img);
    }
    json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *hs = ok ? json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (hs) {
        size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
        size_t total = 8 + padded + data_n;
        uint8_t *out = malloc(total);
        if (out) {
            wr(out, padded, 8);
            memcpy(out + 8, hs, hl);
            memset(out + 8 + hl, ' ', padded - hl);
            if (data_n)
                memcpy(out + 8 + padded, data, data_n);
            put(in_dir(dir, "model.safetensors"), out, total);
        }
        CHECK(out != NULL);
        free(out);
    }
    free(hs);
    free(data);
    json_decref(hdr);
}

/* The fixture's shard s, cut to n bytes (0: half). */
static void put_truncated_shard(const char *fx, const char *model, const char *dir, const char *shard, size_t n)
{
    char src[4096];
    snprintf(src, sizeof src, "%s/%s/hf/%s", fx, model, shard);
    size_t size = 0;
    uint8_t *img = tu_read_file(src, &size);
    CHECKF(img != NULL, "cannot read %s", src);
    if (img)
        put(in_dir(dir, shard), img, n ? n : size / 2);
    free(img);
}

static void hf_cases(const char *fx, const char *model)
{
    char label[128], src[4096];
    const char *d;
#define LABEL(s) (snprintf(label, sizeof label, "%s hf %s", model, s), label)

    d = hf_dir(fx, model, "ok");
    expect_ok(LABEL("symlinked copy"), d);

    /* config.json cut in the middle of the JSON */
    d = hf_dir(fx, model, "cfg-truncated");
    snprintf(src, sizeof src, "%s/%s/hf/config.json", fx, model);
    size_t n = 0;
    char *cfg = tu_read_file(src, &n);
    CHECK(cfg != NULL);
    if (cfg)
        put(in_dir(d, "config.json"), cfg, n / 2);
    free(cfg);
    expect_fail(LABEL("config.json truncated"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "invalid JSON",
                "line", "column");

    d = hf_dir(fx, model, "cfg-garbage");
    put(in_dir(d, "config.json"), "{\"model_type\": \"qwen3_moe\",, }", 30);
    expect_fail(LABEL("config.json garbage"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "invalid JSON",
                "line 1", NULL);

    d = hf_dir(fx, model, "cfg-array");
    put(in_dir(d, "config.json"), "[1, 2, 3]\n", 10);
    expect_fail(LABEL("config.json not an object"), d, LILAC_E_FORMAT, in_dir(d, "config.json"),
                "not a JSON object", NULL, NULL);

    d = hf_dir(fx, model, "cfg-empty");
    put(in_dir(d, "config.json"), "", 0);
    expect_fail(LABEL("config.json empty"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "invalid JSON", NULL,
                NULL);

    d = hf_dir(fx, model, "cfg-missing");
    unlink(in_dir(d, "config.json"));
    expect_fail(LABEL("no config.json"), d, LILAC_E_IO, in_dir(d, "config.json"), "cannot read", NULL, NULL);

    d = hf_dir(fx, model, "llama");
    put_config(fx, model, d, "model_type", json_string("llama"));
    expect_fail(LABEL("model_type llama"), d, LILAC_E_UNSUPPORTED, in_dir(d, "config.json"),
                "unsupported model_type", "'llama'", NULL);

    d = hf_dir(fx, model, "no-model-type");
    put_config(fx, model, d, "model_type", NULL);
    expect_fail(LABEL("no model_type"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "model_type", NULL, NULL);

    d = hf_dir(fx, model, "moe-ff");
    put_config(fx, model, d, "moe_intermediate_size", json_integer(128));
    expect_fail(LABEL("moe_intermediate_size 128"), d, LILAC_E_FORMAT, d,
                "'model.layers.0.mlp.experts.0.gate_proj.weight'", "[256, 256]", "[128, 256]");

    d = hf_dir(fx, model, "no-hidden");
    put_config(fx, model, d, "hidden_size", NULL);
    expect_fail(LABEL("hidden_size missing"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "'hidden_size'",
                "missing", NULL);

    d = hf_dir(fx, model, "hidden-str");
    put_config(fx, model, d, "hidden_size", json_string("256"));
    expect_fail(LABEL("hidden_size a string"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "'hidden_size'",
                "must be a number", NULL);

    d = hf_dir(fx, model, "layers-neg");
    put_config(fx, model, d, "num_hidden_layers", json_integer(-4));
    expect_fail(LABEL("num_hidden_layers -4"), d, LILAC_E_FORMAT, in_dir(d, "config.json"),
                "'num_hidden_layers'", NULL, NULL);

    d = hf_dir(fx, model, "vocab");
    put_config(fx, model, d, "vocab_size", json_integer(4096));
    expect_fail(LABEL("vocab_size 4096"), d, LILAC_E_FORMAT, d, "embed_tokens.weight'", "[2048, 256]",
                "[4096, 256]");

    d = hf_dir(fx, model, "heads");
    put_config(fx, model, d, "num_attention_heads", json_integer(3));
    expect_fail(LABEL("3 heads over 2 kv heads"), d, LILAC_E_FORMAT, in_dir(d, "config.json"),
                "3 query heads cannot share 2", NULL, NULL);

    d = hf_dir(fx, model, "topk");
    put_config(fx, model, d, "num_experts_per_tok", json_integer(9));
    expect_fail(LABEL("9 of 8 experts used"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "9 used per token",
                NULL, NULL);

    d = hf_dir(fx, model, "eps");
    put_config(fx, model, d, "rms_norm_eps", json_string("1e-6"));
    expect_fail(LABEL("rms_norm_eps a string"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "'rms_norm_eps'",
                NULL, NULL);

    d = hf_dir(fx, model, "many-layers");
    put_config(fx, model, d, "num_hidden_layers", json_integer(100000));
    expect_fail(LABEL("100000 layers"), d, LILAC_E_FORMAT, d, "100000 layers", NULL, NULL);

    if (!strcmp(model, "tiny-qwen35moe")) {
        d = hf_dir(fx, model, "layer-types");
        put_config(fx, model, d, "layer_types",
                   json_pack("[ssss]", "linear_attention", "sliding_attention", "linear_attention",
                             "full_attention"));
        expect_fail(LABEL("unknown layer type"), d, LILAC_E_UNSUPPORTED, in_dir(d, "config.json"),
                    "'sliding_attention'", "layer_types[1]", NULL);
        d = hf_dir(fx, model, "layer-types-short");
        put_config(fx, model, d, "layer_types", json_pack("[ss]", "linear_attention", "full_attention"));
        expect_fail(LABEL("layer_types too short"), d, LILAC_E_FORMAT, in_dir(d, "config.json"), "'layer_types'",
                    NULL, NULL);
    }

    d = hf_dir(fx, model, "no-shard");
    unlink(in_dir(d, S2));
    expect_fail(LABEL("missing shard"), d, LILAC_E_IO, in_dir(d, S2), "cannot open", NULL, NULL);

    d = hf_dir(fx, model, "shard-half");
    put_truncated_shard(fx, model, d, S2, 0);
    expect_fail(LABEL("shard truncated in its data"), d, LILAC_E_FORMAT, in_dir(d, S2), "past the data section",
                NULL, NULL);

    d = hf_dir(fx, model, "shard-header");
    put_truncated_shard(fx, model, d, S1, 1000);
    expect_fail(LABEL("shard truncated in its header"), d, LILAC_E_FORMAT, in_dir(d, S1), "runs past the end",
                NULL, NULL);

    d = hf_dir(fx, model, "shard-empty");
    put_truncated_shard(fx, model, d, S1, 1);
    expect_fail(LABEL("shard of 1 byte"), d, LILAC_E_FORMAT, in_dir(d, S1), "too short", NULL, NULL);

    /* the index names a tensor its shard does not hold */
    d = hf_dir(fx, model, "index-ghost");
    snprintf(src, sizeof src, "%s/%s/hf/" IDX, fx, model);
    json_error_t je;
    json_t *ix = json_load_file(src, 0, &je);
    CHECKF(ix != NULL, "%s: %s", src, je.text);
    if (ix) {
        json_object_set_new(json_object_get(ix, "weight_map"), "model.layers.0.ghost.weight", json_string(S1));
        put_json(in_dir(d, IDX), ix);
        json_decref(ix);
    }
    expect_fail(LABEL("index names an absent tensor"), d, LILAC_E_FORMAT, in_dir(d, S1),
                "'model.layers.0.ghost.weight'", IDX, NULL);

    d = hf_dir(fx, model, "index-bad");
    put(in_dir(d, IDX), "{\"weight_map\": ", 15);
    expect_fail(LABEL("index truncated"), d, LILAC_E_FORMAT, in_dir(d, IDX), "not valid JSON", NULL, NULL);

    /* one file: first the whole model (the control), then without a tensor */
    d = hf_dir(fx, model, "single");
    unlink(in_dir(d, IDX));
    unlink(in_dir(d, S1));
    unlink(in_dir(d, S2));
    write_single(fx, model, d, NULL);
    expect_ok(LABEL("single-file copy"), d);
    d = hf_dir(fx, model, "single-missing");
    unlink(in_dir(d, IDX));
    unlink(in_dir(d, S1));
    unlink(in_dir(d, S2));
    write_single(fx, model, d, "model.layers.0.input_layernorm.weight");
    expect_fail(LABEL("tensor missing"), d, LILAC_E_FORMAT, d, "missing tensor",
                "'model.layers.0.input_layernorm.weight'", NULL);
    d = hf_dir(fx, model, "single-no-head");
    unlink(in_dir(d, IDX));
    unlink(in_dir(d, S1));
    unlink(in_dir(d, S2));
    write_single(fx, model, d, "model.layers.3.mlp.experts.7.down_proj.weight");
    expect_fail(LABEL("last expert missing"), d, LILAC_E_FORMAT, d, "missing tensor",
                "'model.layers.3.mlp.experts.7.down_proj.weight'", NULL);

    /* a directory with neither index nor single file */
    d = hf_dir(fx, model, "no-weights");
    unlink(in_dir(d, IDX));
    unlink(in_dir(d, S1));
    unlink(in_dir(d, S2));
    expect_fail(LABEL("no weights"), d, LILAC_E_IO, d, "model.safetensors", NULL, NULL);
#undef LABEL
}

/* ---- paths that are no model at all ------------------------------------ */

static void path_cases(void)
{
    const char *p = tmp_path("does-not-exist.gguf");
    expect_fail("path that does not exist", p, LILAC_E_IO, p, "No such file", NULL, NULL);
    p = tmp_path("not-a-checkpoint");
    CHECK(mkdir(p, 0700) == 0);
    put(tmp_path("not-a-checkpoint/notes.txt"), "hello\n", 6);
    expect_fail("directory that is no checkpoint", p, LILAC_E_IO, p, "config.json", NULL, NULL);
    p = tmp_path("empty.gguf");
    put(p, "", 0);
    expect_fail("empty file", p, LILAC_E_FORMAT, p, "truncated", NULL, NULL);
    p = tmp_path("text.gguf");
    put(p, "just some text, not a model\n", 28);
    expect_fail("text file", p, LILAC_E_FORMAT, p, "not a GGUF file", NULL, NULL);
    expect_fail("/dev/null", "/dev/null", ANY_STATUS, "/dev/null", "not a regular file", NULL, NULL);

    lilac_error err;
    lilac_model *m = (lilac_model *)(uintptr_t)1;
    lilac_status st = lilac_model_open("", NULL, &m, &err);
    CHECKF(st == LILAC_E_ARG && m == NULL, "empty path: %s", lilac_status_name(st));
    m = (lilac_model *)(uintptr_t)1;
    st = lilac_model_open(NULL, NULL, &m, &err);
    CHECKF(st == LILAC_E_ARG && m == NULL, "NULL path: %s", lilac_status_name(st));
}

/* ---- sequence arguments ------------------------------------------------- */

static void expect_eval_fail(const char *label, lilac_seq *s, const int32_t *toks, int n, lilac_status want,
                             const char *phrase, float *logits)
{
    lilac_error err;
    memset(&err, 0, sizeof err);
    lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_LAST, .logits = logits};
    int pos = lilac_seq_pos(s);
    lilac_status st = lilac_seq_eval(s, toks, n, &o, &err);
    CHECKF(st == want, "%s: status '%s', expected '%s': %s", label, lilac_status_name(st), lilac_status_name(want),
           err.msg);
    if (st != LILAC_OK) {
        CHECKF(strchr(err.msg, '\n') == NULL, "%s: message is not one line: %s", label, err.msg);
        CHECKF(strstr(err.msg, phrase) != NULL, "%s: message lacks '%s': %s", label, phrase, err.msg);
        if (verbose)
            printf("  %-34s [%s] %s\n", label, lilac_status_name(st), err.msg);
    }
    CHECKF(lilac_seq_pos(s) == pos, "%s: the failed call moved the position from %d to %d", label, pos,
           lilac_seq_pos(s));
}

static void seq_cases(const char *fx, const char *model)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/gguf/model-bf16.gguf", fx, model);
    lilac_model_params mp = lilac_model_default_params();
    mp.n_threads = 1;
    lilac_model *m = NULL;
    lilac_error err;
    if (lilac_model_open(path, &mp, &m, &err)) {
        CHECKF(0, "%s: %s", path, err.msg);
        return;
    }
    int V = lilac_model_hparams(m)->n_vocab;
    lilac_seq *s = (lilac_seq *)(uintptr_t)1;
    lilac_status st = lilac_seq_new(m, 0, &s, &err);
    CHECKF(st == LILAC_E_ARG && s == NULL, "seq_new(n_ctx 0): %s", lilac_status_name(st));
    s = (lilac_seq *)(uintptr_t)1;
    st = lilac_seq_new(m, -5, &s, &err);
    CHECKF(st == LILAC_E_ARG && s == NULL, "seq_new(n_ctx -5): %s", lilac_status_name(st));
    s = NULL;
    st = lilac_seq_new(m, 4, &s, &err);
    CHECKF(st == LILAC_OK && s, "seq_new(4): %s", err.msg);
    float *logits = malloc((size_t)V * sizeof(float));
    if (s && logits) {
        int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        int32_t big[2] = {1, (int32_t)V};
        int32_t neg[1] = {-1};
        char l[128];
        snprintf(l, sizeof l, "%s: token id %d (vocab %d)", model, V, V);
        expect_eval_fail(l, s, big, 2, LILAC_E_ARG, "outside the vocabulary", logits);
        snprintf(l, sizeof l, "%s: token id -1", model);
        expect_eval_fail(l, s, neg, 1, LILAC_E_ARG, "outside the vocabulary", logits);
        snprintf(l, sizeof l, "%s: 5 tokens, context 4", model);
        expect_eval_fail(l, s, toks, 5, LILAC_E_RANGE, "do not fit", logits);
        snprintf(l, sizeof l, "%s: n = 0", model);
        expect_eval_fail(l, s, toks, 0, LILAC_E_ARG, "no tokens", logits);
        snprintf(l, sizeof l, "%s: n = -3", model);
        expect_eval_fail(l, s, toks, -3, LILAC_E_ARG, "no tokens", logits);
        snprintf(l, sizeof l, "%s: no token array", model);
        expect_eval_fail(l, s, NULL, 2, LILAC_E_ARG, "no token array", logits);
        snprintf(l, sizeof l, "%s: no logits buffer", model);
        expect_eval_fail(l, s, toks, 2, LILAC_E_ARG, "no buffer", NULL);
        /* the sequence still works after the refusals, and fills up exactly */
        lilac_eval_opts o = {.logits_mode = LILAC_LOGITS_LAST, .logits = logits};
        st = lilac_seq_eval(s, toks, 3, &o, &err);
        CHECKF(st == LILAC_OK && lilac_seq_pos(s) == 3, "%s: eval after refusals: %s", model, err.msg);
        snprintf(l, sizeof l, "%s: 2 tokens, 1 place left", model);
        expect_eval_fail(l, s, toks, 2, LILAC_E_RANGE, "do not fit", logits);
        st = lilac_seq_eval(s, toks, 1, &o, &err);
        CHECKF(st == LILAC_OK && lilac_seq_pos(s) == 4, "%s: last place: %s", model, err.msg);
        snprintf(l, sizeof l, "%s: 1 token, context full", model);
        expect_eval_fail(l, s, toks, 1, LILAC_E_RANGE, "does not fit", logits);
    }
    free(logits);
    lilac_seq_free(s);
    lilac_model_free(m);
}

int main(int argc, char **argv)
{
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lilac-load-errors-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    path_cases();
    const char *fx = tu_fixtures();
    if (fx) {
        const char *models[] = {"tiny-qwen35moe", "tiny-qwen3moe"};
        for (size_t i = 0; i < 2; i++) {
            gguf_cases(fx, models[i]);
            hf_cases(fx, models[i]);
            seq_cases(fx, models[i]);
        }
    }
    rm_tree(tmpdir);
    struct stat st;
    CHECKF(stat(tmpdir, &st) != 0, "%s was not removed", tmpdir);
    if (!fx && !tu_failures)
        SKIP("fixtures not found (set LILAC_FIXTURES or place them at %s/../shared/fixtures); "
             "only the %d checks that need no fixture ran",
             LILAC_SOURCE_DIR, tu_checks);
    TEST_END();
}
