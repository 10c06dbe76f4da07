/* model: opening a model — telling a GGUF file from a checkpoint
 * directory, reading the HF config, dispatching to the architecture — and
 * what the public API says about a loaded model. */
#include "model/model.h"
#include "model/decoder_cuda.h"
#include "model/repack.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/dtype.h"
#include "model/loader.h"
#include "util/err.h"

void *lilac_model_alloc(lilac_model *m, size_t bytes)
{
    lilac_alloc_list *l = &m->owned;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        void **p = realloc(l->ptrs, cap * sizeof *p);
        if (!p)
            return NULL;
        l->ptrs = p;
        l->cap = cap;
    }
    void *mem = calloc(1, bytes ? bytes : 1);
    if (mem) {
        l->ptrs[l->n++] = mem;
        m->owned_bytes += bytes;
    }
    return mem;
}

void lilac_model_log(const lilac_model *m, lilac_log_level level, const char *fmt, ...)
{
    if (!m->params.log)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    m->params.log(m->params.log_user, level, buf);
}

int lilac_backend_parse(const char *s)
{
    if (!s || !strcmp(s, "auto"))
        return LILAC_BACKEND_AUTO;
    if (!strcmp(s, "cpu"))
        return LILAC_BACKEND_CPU;
    if (!strcmp(s, "cuda"))
        return LILAC_BACKEND_CUDA;
    return -1;
}

lilac_model_params lilac_model_default_params(void)
{
    lilac_model_params p = {0};
    int b = lilac_backend_parse(getenv("LILAC_BACKEND"));
    p.backend = b < 0 ? LILAC_BACKEND_AUTO : b;
    p.no_repack = !lilac_repack_enabled_env();
    const char *kv = getenv("LILAC_KV_TYPE");
    p.kv_type = kv && *kv ? lilac_kv_type_parse(kv) : LILAC_KV_F32; /* -1: refused at open */
    return p;
}

int lilac_kv_type_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "f32"))
        return LILAC_KV_F32;
    if (!strcmp(s, "f16"))
        return LILAC_KV_F16;
    return -1;
}

const char *lilac_kv_type_name(int t) { return t == LILAC_KV_F32 ? "f32" : t == LILAC_KV_F16 ? "f16" : "?"; }

const char *lilac_model_backend(const lilac_model *m) { return m->cuda ? "cuda" : "cpu"; }

/* Put the model on the GPU when asked (or when one is there, for auto). */
static lilac_status pick_backend(lilac_model *m, lilac_error *err)
{
    int b = m->params.backend;
    if (b == LILAC_BACKEND_CPU)
        return LILAC_OK;
    lilac_error why;
    lilac_status st = lilac_cuda_model_new(m, &m->cuda, &why);
    if (st == LILAC_OK) {
        lilac_model_log(m, LILAC_LOG_INFO, "running on %s", lilac_cuda_model_device(m->cuda));
        return LILAC_OK;
    }
    if (b == LILAC_BACKEND_CUDA) {
        if (!err)
            return st;
        *err = why;
        return lilac_fail_prefix(err, "--backend cuda");
    }
#ifdef LILAC_CUDA
    lilac_model_log(m, LILAC_LOG_INFO, "running on the CPU: %s", why.msg);
#endif
    return LILAC_OK;
}

void lilac_model_free(lilac_model *m)
{
    if (!m)
        return;
    lilac_model_free_text(m);
    lilac_cuda_model_free(m->cuda);
    lilac_pool_free(m->pool);
    lilac_model_repack_free(m);
    for (size_t i = 0; i < m->owned.n; i++)
        free(m->owned.ptrs[i]);
    free(m->owned.ptrs);
    gguf_close(m->gguf);
    st_close(m->st);
    free(m->path);
    free(m);
}

static const struct {
    const char *gguf_arch;     /* general.architecture */
    const char *hf_model_type; /* config.json model_type (text model) */
    lilac_arch arch;
    lilac_status (*load)(lilac_loader *);
} archs[] = {
    {"qwen35moe", "qwen3_5_moe_text", LILAC_ARCH_QWEN35MOE, qwen35moe_load},
    {"qwen35moe", "qwen3_5_moe", LILAC_ARCH_QWEN35MOE, qwen35moe_load},
    {"qwen3moe", "qwen3_moe", LILAC_ARCH_QWEN3MOE, qwen3moe_load},
};

/* Bookkeeping over the tensors bound: counts by type, bytes, parameters;
 * and a note for each family of tensors left unused. */
static void account(lilac_loader *ld, size_t n_tensors)
{
    lilac_model *m = ld->m;
    size_t n_vision = 0, n_mtp = 0, n_other = 0;
    const char *other_example = NULL;
    for (size_t i = 0; i < n_tensors; i++) {
        int type;
        size_t nbytes;
        uint64_t n_el = 1;
        const char *name;
        if (ld->is_gguf) {
            const gguf_tensor *t = gguf_tensor_at(ld->gguf, i);
            type = t->type;
            nbytes = t->nbytes;
            for (int d = 0; d < t->n_dims; d++)
                n_el *= (uint64_t)t->ne[d];
            name = t->name;
        } else {
            const st_tensor *t = st_tensor_at(ld->st, i);
            type = t->dtype;
            nbytes = t->nbytes;
            for (int d = 0; d < t->n_dims; d++)
                n_el *= (uint64_t)t->shape[d];
            name = t->name;
        }
        if (!ld->used[i]) {
            if (strstr(name, "visual.") || strstr(name, "vision_tower") || strncmp(name, "model.vision", 12) == 0)
                n_vision++;
            else if (strncmp(name, "mtp.", 4) == 0 || strstr(name, ".mtp."))
                n_mtp++;
            else {
                n_other++;
                if (!other_example)
                    other_example = name;
            }
            continue;
        }
        m->weight_bytes += nbytes;
        m->n_params += n_el;
        if (strstr(name, "_exps.") || (strstr(name, "mlp.experts.") && !strstr(name, "shared")))
            m->expert_bytes += nbytes;
        const lilac_dtype_info *di = lilac_dtype_get(type);
        const char *tn = di ? di->name : "?";
        size_t k = 0;
        while (k < m->n_counts && strcmp(m->counts[k].type_name, tn) != 0)
            k++;
        if (k == m->n_counts) {
            if (k == sizeof m->counts / sizeof m->counts[0])
                continue;
            m->counts[m->n_counts++].type_name = tn;
        }
        m->counts[k].n_tensors++;
        m->counts[k].bytes += nbytes;
    }
    if (n_vision)
        lilac_model_log(m, LILAC_LOG_INFO, "%s: ignored %zu tensors of the vision tower (text only)", m->path, n_vision);
    if (n_mtp)
        lilac_model_log(m, LILAC_LOG_INFO, "%s: ignored %zu tensors of the multi-token-prediction head", m->path, n_mtp);
    if (n_other)
        lilac_model_log(m, LILAC_LOG_WARN, "%s: %zu tensors unused by the %s architecture, e.g. '%s'", m->path,
                        n_other, m->arch_name, other_example);
}

static lilac_status open_gguf(lilac_loader *ld, lilac_error *err)
{
    lilac_model *m = ld->m;
    lilac_status s = gguf_open(m->path, &m->gguf, err);
    if (s)
        return s;
    char *arch = NULL;
    if ((s = gguf_get_str(m->gguf, "general.architecture", &arch, err)))
        return s; /* the message already starts with the file's path */
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(arch, archs[i].gguf_arch) == 0) {
            free(arch);
            m->arch_name = archs[i].gguf_arch;
            m->hp.arch = archs[i].arch;
            m->format = "gguf";
            ld->is_gguf = true;
            ld->gguf = m->gguf;
            ld->used = calloc(gguf_n_tensors(m->gguf) + 1, 1);
            if (!ld->used)
                return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
            if ((s = archs[i].load(ld)))
                return s;
            account(ld, gguf_n_tensors(m->gguf));
            return LILAC_OK;
        }
    s = lilac_fail(err, LILAC_E_UNSUPPORTED,
                   "%s: unsupported architecture '%s' (lilac runs qwen35moe and qwen3moe)", m->path, arch);
    free(arch);
    return s;
}

static lilac_status open_hf(lilac_loader *ld, lilac_error *err)
{
    lilac_model *m = ld->m;
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", m->path);
    json_error_t je;
    json_t *root = json_load_file(cfg_path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (access(cfg_path, R_OK) != 0)
            return lilac_fail(err, LILAC_E_IO, "%s: cannot read: %s", cfg_path, strerror(errno));
        return lilac_fail(err, LILAC_E_FORMAT, "%s: invalid JSON at line %d, column %d: %s", cfg_path, je.line,
                          je.column, je.text);
    }
    lilac_status s = LILAC_OK;
    json_t *cfg = root;
    json_t *text = json_object_get(root, "text_config");
    if (!json_is_object(root)) {
        s = lilac_fail(err, LILAC_E_FORMAT, "%s: not a JSON object", cfg_path);
        goto done;
    }
    if (json_is_object(text)) {
        cfg = text;
        /* Multimodal configs may say tie_word_embeddings only at the top. */
        json_t *tie = json_object_get(root, "tie_word_embeddings");
        if (tie && !json_object_get(text, "tie_word_embeddings"))
            json_object_set(text, "tie_word_embeddings", tie);
    }
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    if (!mt && cfg != root)
        mt = json_string_value(json_object_get(root, "model_type"));
    if (!mt) {
        s = lilac_fail(err, LILAC_E_FORMAT, "%s: no 'model_type'", cfg_path);
        goto done;
    }
    size_t a = 0;
    while (a < sizeof archs / sizeof archs[0] && strcmp(mt, archs[a].hf_model_type) != 0)
        a++;
    if (a == sizeof archs / sizeof archs[0]) {
        s = lilac_fail(err, LILAC_E_UNSUPPORTED,
                       "%s: unsupported model_type '%s' (lilac runs qwen3_5_moe_text / qwen3_5_moe and qwen3_moe)",
                       cfg_path, mt);
        goto done;
    }
    if ((s = st_open(m->path, &m->st, err)))
        goto done;
    m->arch_name = archs[a].gguf_arch;
    m->hp.arch = archs[a].arch;
    m->format = "safetensors";
    ld->is_gguf = false;
    ld->st = m->st;
    ld->config = cfg;
    /* Multimodal checkpoints keep the text model under model.language_model. */
    ld->hf_prefix = st_find(m->st, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
    ld->used = calloc(st_n_tensors(m->st) + 1, 1);
    if (!ld->used) {
        s = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        goto done;
    }
    if ((s = ld_mlx_detect(ld, root))) /* MLX checkpoints: model/loader_mlx.c */
        goto done;
    if ((s = archs[a].load(ld)))
        goto done;
    account(ld, st_n_tensors(m->st));
done:
    json_decref(root);
    return s;
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

lilac_status lilac_model_open(const char *path, const lilac_model_params *params, lilac_model **out,
                              lilac_error *err)
{
    *out = NULL;
    if (!path || !*path)
        return lilac_fail(err, LILAC_E_ARG, "no model path given");
    struct stat st;
    if (stat(path, &st) != 0)
        return lilac_fail(err, LILAC_E_IO, "%s: %s", path, strerror(errno));
    lilac_model *m = calloc(1, sizeof *m);
    if (!m)
        return lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    m->params = params ? *params : lilac_model_default_params();
    if (m->params.kv_type != LILAC_KV_F32 && m->params.kv_type != LILAC_KV_F16) {
        int t = m->params.kv_type;
        free(m);
        return lilac_fail(err, LILAC_E_ARG, "unknown KV cache type %d (LILAC_KV_F32 or LILAC_KV_F16; LILAC_KV_TYPE "
                          "and --kv-type take f32 or f16)", t);
    }
    m->path = strdup(path);
    lilac_loader ld = {.m = m, .err = err};
    lilac_status s;
    if (!m->path)
        s = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
    else if (S_ISDIR(st.st_mode))
        s = open_hf(&ld, err);
    else
        s = open_gguf(&ld, err);
    free(ld.used);
    if (!s) {
        int n = m->params.n_threads > 0 ? m->params.n_threads : online_cpus();
        m->params.n_threads = n;
        /* the model's own copy of the kernel set, on the fast path
         * for quantized weights unless asked to be precise */
        lilac_cpu_kernels *k = lilac_model_alloc(m, sizeof *k);
        if (!k) {
            s = lilac_fail(err, LILAC_E_NOMEM, "out of memory");
        } else {
            *k = lilac_cpu_with(lilac_cpu_best(), !m->params.precise);
            m->kern = k;
            s = lilac_pool_new(n, &m->pool, err);
        }
    }
    if (!s)
        s = pick_backend(m, err);
    /* the device keeps its own float32 KV cache: say so rather than run
     * something other than what was asked */
    if (!s && m->cuda && m->params.kv_type != LILAC_KV_F32)
        s = lilac_fail(err, LILAC_E_UNSUPPORTED,
                       "KV cache type %s: the CUDA backend keeps its KV cache in f32; use --kv-type f32, or "
                       "--backend cpu (LILAC_BACKEND=cpu) for an f16 cache",
                       lilac_kv_type_name(m->params.kv_type));
    if (s) {
        lilac_model_free(m);
        return s;
    }
    *out = m;
    return LILAC_OK;
}

const lilac_hparams *lilac_model_hparams(const lilac_model *m) { return &m->hp; }
const char *lilac_model_arch_name(const lilac_model *m) { return m->arch_name; }
const char *lilac_model_format(const lilac_model *m) { return m->format; }
int lilac_model_n_threads(const lilac_model *m) { return m->params.n_threads; }
int lilac_model_kv_type(const lilac_model *m) { return m->params.kv_type; }
uint64_t lilac_model_weight_bytes(const lilac_model *m) { return m->weight_bytes; }
uint64_t lilac_model_n_params(const lilac_model *m) { return m->n_params; }

uint64_t lilac_model_active_bytes(const lilac_model *m)
{
    const double unused = m->hp.n_expert > 0 ? 1.0 - (double)m->hp.n_expert_used / m->hp.n_expert : 0.0;
    uint64_t a = m->weight_bytes - (uint64_t)(unused * (double)m->expert_bytes);
    /* the embedding: a token reads one row of it, unless the output is the same matrix (tied) and reads it all */
    const lilac_mat *e = &m->w.tok_embd;
    const uint64_t row = e->row_bytes + (e->scales ? e->scale_row_bytes : 0) + (e->biases ? e->scale_row_bytes : 0);
    if (e->data && e->data != m->w.output.data && e->rows > 1 && (uint64_t)(e->rows - 1) * row < a)
        a -= (uint64_t)(e->rows - 1) * row;
    return a;
}

size_t lilac_model_type_counts(const lilac_model *m, lilac_type_count *out, size_t max)
{
    for (size_t i = 0; i < m->n_counts && i < max; i++)
        out[i] = m->counts[i];
    return m->n_counts;
}
