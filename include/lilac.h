/* lilac: a local inference engine for Mixture-of-Experts language models.
 *
 * The one public header. Every function that can fail returns a
 * lilac_status and fills a lilac_error the caller can print. Objects are
 * created by *_open / *_new and released by the matching *_free. */
#ifndef LILAC_H
#define LILAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

typedef enum lilac_status {
    LILAC_OK = 0,
    LILAC_E_IO,          /* a file could not be opened or read */
    LILAC_E_FORMAT,      /* a file is malformed or truncated */
    LILAC_E_UNSUPPORTED, /* well-formed, but not something lilac runs */
    LILAC_E_ARG,         /* a bad argument from the caller */
    LILAC_E_NOMEM,       /* out of memory */
    LILAC_E_RANGE,       /* a limit was reached, e.g. the context is full */
    LILAC_E_INTERNAL,    /* a bug in lilac */
} lilac_status;

typedef struct lilac_error {
    lilac_status status;
    char msg[1024];
} lilac_error;

const char *lilac_status_name(lilac_status s);

/* ---- models ------------------------------------------------------------ */

#define LILAC_MAX_LAYERS 512

typedef enum lilac_arch {
    LILAC_ARCH_QWEN3MOE = 1,  /* Qwen3-30B-A3B and kin */
    LILAC_ARCH_QWEN35MOE = 2, /* Qwen3.5/3.6-MoE text decoder, e.g. Qwen3.6-35B-A3B */
} lilac_arch;

typedef enum lilac_layer_kind {
    LILAC_LAYER_ATTENTION = 0, /* full (softmax) attention */
    LILAC_LAYER_DELTANET = 1,  /* Gated DeltaNet linear attention */
} lilac_layer_kind;

/* Hyper-parameters, all read from the model file. */
typedef struct lilac_hparams {
    lilac_arch arch;
    int n_layer, n_embd, n_vocab, n_ctx_train;
    float norm_eps;
    /* full-attention layers */
    int n_head, n_head_kv, head_dim;
    int rope_dims;          /* leading dims of each head that are rotated */
    float rope_theta;
    bool attn_output_gate;  /* q_proj also yields a sigmoid gate per head */
    /* Gated DeltaNet layers */
    int ssm_k_heads, ssm_v_heads, ssm_k_dim, ssm_v_dim, ssm_conv_kernel;
    /* mixture of experts */
    int n_expert, n_expert_used, expert_ff;
    int shared_ff;          /* 0: no shared expert */
    bool norm_topk;         /* renormalize the chosen experts' weights */
    bool tied_embeddings;
    uint8_t layer_kind[LILAC_MAX_LAYERS]; /* lilac_layer_kind per layer */
} lilac_hparams;

typedef struct lilac_model lilac_model;

typedef enum lilac_log_level {
    LILAC_LOG_ERROR = 0,
    LILAC_LOG_WARN = 1,
    LILAC_LOG_INFO = 2, /* notes, e.g. tensors skipped at load */
    LILAC_LOG_DEBUG = 3,
} lilac_log_level;

/* Where the library's messages go; NULL sends nothing anywhere. */
typedef void (*lilac_log_fn)(void *user, lilac_log_level level, const char *msg);

typedef struct lilac_model_params {
    int n_threads;      /* 0: one per online CPU */
    lilac_log_fn log;   /* may be NULL */
    void *log_user;
    /* Keep activations in float32 against quantized (Q8_0, Q4_0, Q*_K)
     * weights: slower, within float32 rounding of the dequantized model.
     * false (the default): the fast path, which rounds each activation to
     * 16-bit fixed point per block of 32 for integer dot products (still
     * far closer to the model than llama.cpp's 8-bit activations). */
    bool precise;
    /* Where the model runs: LILAC_BACKEND_AUTO (a CUDA GPU when lilac was
     * built with CUDA and one is present, else the CPU, with a note saying
     * why), _CPU, or _CUDA (an error when no GPU can be used). The
     * environment variable LILAC_BACKEND=cpu|cuda|auto sets the default. */
    int backend;
    /* Keep Q4_K / Q6_K matrices as mapped from the file. false (the
     * default, unless LILAC_REPACK=0): on the CPU's fast path they are
     * copied once at load, 16 rows interleaved, into anonymous memory of
     * the same size, for kernels about twice as fast; loading then reads
     * them all. */
    bool no_repack;
    /* The element type of the KV cache of the full-attention layers:
     * LILAC_KV_F32 (the default: exact) or LILAC_KV_F16 (IEEE half, as
     * llama.cpp's default: half the memory and half the bytes a token reads
     * at depth, keys and values rounded to 11 significant bits). CPU only:
     * the CUDA backend refuses F16 at lilac_model_open. The environment
     * variable LILAC_KV_TYPE=f32|f16 sets the default (another value makes
     * lilac_model_open fail, saying so). */
    int kv_type;
} lilac_model_params;

enum { LILAC_KV_F32 = 0, LILAC_KV_F16 = 1 };
/* Parse "f32", "f16"; -1 for anything else. */
int lilac_kv_type_parse(const char *s);
/* "f32" / "f16" ("?" for an unknown value). */
const char *lilac_kv_type_name(int kv_type);

enum { LILAC_BACKEND_AUTO = 0, LILAC_BACKEND_CPU = 1, LILAC_BACKEND_CUDA = 2 };
/* Whether a CUDA GPU can be used: 1 with its description in out ("NVIDIA
 * H200, 139.8 GiB (137.2 free), sm_90, driver 13.0"), or 0 with why not. */
int lilac_gpu_describe(char *out, size_t cap);
/* "cpu" / "cuda": the backend a model runs on. */
const char *lilac_model_backend(const lilac_model *m);
/* Parse "auto", "cpu", "cuda"; -1 for anything else. */
int lilac_backend_parse(const char *s);

lilac_model_params lilac_model_default_params(void);

/* path: a GGUF file (the first part of a split set), or a Hugging Face
 * checkpoint directory (config.json + safetensors). Weights are mapped, not
 * copied. */
lilac_status lilac_model_open(const char *path, const lilac_model_params *params,
                              lilac_model **out, lilac_error *err);
void lilac_model_free(lilac_model *m);

const lilac_hparams *lilac_model_hparams(const lilac_model *m);
const char *lilac_model_arch_name(const lilac_model *m); /* "qwen35moe", "qwen3moe" */
const char *lilac_model_format(const lilac_model *m);    /* "gguf", "safetensors" */
int lilac_model_n_threads(const lilac_model *m);
int lilac_model_kv_type(const lilac_model *m); /* LILAC_KV_F32 / LILAC_KV_F16 */

typedef struct lilac_type_count {
    const char *type_name; /* "BF16", "F32", ... */
    size_t n_tensors;
    uint64_t bytes;
} lilac_type_count;

/* Tensors the model uses, counted by type; returns how many types were
 * found (at most max are written). */
size_t lilac_model_type_counts(const lilac_model *m, lilac_type_count *out, size_t max);
uint64_t lilac_model_weight_bytes(const lilac_model *m);
/* One-time work after the memory check and before the first token: on the
 * CPU's fast path, the Q4_K / Q6_K matrices are repacked for the 16-row
 * kernels (see lilac_model_params.no_repack), reading every one of them.
 * lilac_seq_new does it when it has not been done; call it to do it at a
 * time of your choosing (a server before it says it is ready). */
lilac_status lilac_model_prepare(lilac_model *m, lilac_error *err);
/* The bytes repacked (0: none, or not prepared yet). */
uint64_t lilac_model_repacked_bytes(const lilac_model *m);
uint64_t lilac_model_n_params(const lilac_model *m);
/* Weight bytes one generated token reads: everything but the routed experts
 * and the token embedding, plus n_expert_used / n_expert of the experts and
 * one row of the embedding (all of it where the output matrix is tied to it). */
uint64_t lilac_model_active_bytes(const lilac_model *m);

/* Bytes one sequence of n_ctx tokens needs beside the weights. */
typedef struct lilac_mem_plan {
    uint64_t kv_bytes;        /* KV cache of the full-attention layers */
    uint64_t recurrent_bytes; /* conv + recurrent state of the DeltaNet layers */
    uint64_t scratch_bytes;   /* activations for a batch of n_batch tokens */
} lilac_mem_plan;
lilac_mem_plan lilac_model_mem_plan(const lilac_model *m, int n_ctx, int n_batch);

/* What running the model needs against what the machine can give. Weights
 * count in full: they are mapped, and a MoE touches all its experts soon,
 * so the file must stay in memory or every step reads the disk. */
typedef struct lilac_mem_report {
    uint64_t weights, kv, recurrent, scratch, other, total;
    uint64_t mem_total, mem_available, swap_total;
    uint64_t cgroup_limit, cgroup_usage; /* 0: no limit found */
    uint64_t budget;                     /* what this process can use */
    bool fits;
    int max_ctx;                         /* the largest context that fits (0: none) */
    /* Set by lilac_model_gpu_mem_report only: */
    bool gpu;                            /* a device plan: mem_total, mem_available are the GPU's */
    bool have_device;                    /* a CUDA device to compare with; else budget 0, fits false */
    uint64_t held;                       /* what this model already holds on the device (in budget) */
    char device[192];                    /* "NVIDIA H200 (139.8 GiB, sm_90)", or why there is no device */
    int pf_rows;                         /* the prefill chunk's rows the device plan counts (scratch) */
} lilac_mem_report;

lilac_mem_report lilac_model_mem_report(const lilac_model *m, int n_ctx, int n_parallel);
/* The same plan in device memory, for the model on the CUDA backend (the
 * model may be open on either: nothing is allocated): weights as the file
 * holds them, the KV cache of the full-attention layers and the DeltaNet
 * state per sequence (float32), scratch (the one-token step's and the
 * prefill chunk's buffers, the tensor-core products' scratch, a sequence's
 * attention scores), other (a margin for the CUDA context, the allocator's
 * granularity and each sequence's graph). budget: the device's free memory
 * plus what this model already holds there, so that it answers the same
 * before and after the upload, capped by LILAC_GPU_MEM_LIMIT (bytes, or
 * with a K/M/G suffix). Without a device: have_device false, budget 0. */
lilac_mem_report lilac_model_gpu_mem_report(const lilac_model *m, int n_ctx, int n_parallel);
/* LILAC_OK, or LILAC_E_NOMEM with the numbers and what to change; a model
 * on the CUDA backend must fit in device memory too. */
lilac_status lilac_model_mem_check(const lilac_model *m, int n_ctx, int n_parallel, lilac_error *err);

/* ---- sequences --------------------------------------------------------- */

typedef struct lilac_seq lilac_seq;

/* A sequence: its KV cache and recurrent state, up to n_ctx tokens. */
lilac_status lilac_seq_new(lilac_model *m, int n_ctx, lilac_seq **out, lilac_error *err);
void lilac_seq_free(lilac_seq *s);
int lilac_seq_pos(const lilac_seq *s); /* tokens consumed so far */
void lilac_seq_reset(lilac_seq *s);
/* Make dst hold what src holds (its KV rows and recurrent state at its
 * position): a conversation forked, or a prefilled context reused. Both of
 * one model; dst's context must be at least src's position. */
lilac_status lilac_seq_copy(lilac_seq *dst, const lilac_seq *src, lilac_error *err);

typedef enum lilac_logits_mode {
    LILAC_LOGITS_LAST = 0, /* n_vocab floats: the last position's */
    LILAC_LOGITS_ALL = 1,  /* n * n_vocab floats, row-major */
    LILAC_LOGITS_NONE = 2,
    LILAC_LOGITS_TOP = 3,  /* the last position's top_k best and log-sum-exp into *top (lilac_logits_top_of's);
                            * logits: n_vocab floats the backend may use on the way */
} lilac_logits_mode;

/* The most likely tokens of one position and the softmax's log-denominator:
 * what the sampler needs without penalties and with a bounded top_k
 * (lilac_sampler_top_k). On a GPU they are reduced there and only these
 * come back to the host, not the whole vocabulary's logits. */
#define LILAC_TOP_MAX 128
typedef struct lilac_logits_top {
    double lse;                  /* log sum_i e^logit_i over the whole vocabulary */
    int32_t n;                   /* candidates: min(top_k, n_vocab) */
    int32_t id[LILAC_TOP_MAX];   /* best first; equal logits: the lower id first (NaN counts as -inf) */
    float logit[LILAC_TOP_MAX];
} lilac_logits_top;

/* The same from host logits (the CPU's way, and the GPU reduction's oracle). k in 1..LILAC_TOP_MAX. */
void lilac_logits_top_of(const float *logits, int n_vocab, int k, lilac_logits_top *t);

/* n floats for lilac_eval_opts.logits where the model's backend writes them
 * fastest: page-locked host memory when the model runs on a GPU (the copy
 * from the device lands there, with no staging copy), plain memory
 * otherwise. NULL when out of memory. Free with lilac_logits_free. */
float *lilac_logits_alloc(const lilac_model *m, size_t n);
void lilac_logits_free(float *p);

typedef struct lilac_eval_opts {
    lilac_logits_mode logits_mode;
    float *logits; /* where logits go (NULL with LILAC_LOGITS_NONE) */
    /* Optional, for debugging: (n_layer + 1) * n * n_embd floats: the
     * residual stream after the embedding and after each layer, the last
     * after the final norm. */
    float *hidden;
    lilac_logits_top *top; /* LILAC_LOGITS_TOP: where the candidates go */
    int top_k;             /* LILAC_LOGITS_TOP: how many (1..LILAC_TOP_MAX) */
} lilac_eval_opts;

/* Feed n tokens at the sequence's current position. n > 1 runs the
 * prefill path (chunked delta rule); n == 1 the decode path. */
lilac_status lilac_seq_eval(lilac_seq *s, const int32_t *tokens, int n,
                            const lilac_eval_opts *opts, lilac_error *err);

/* ---- batches: several sequences in one step ----------------------------- */

/* Runs the tokens of several sequences together, so that each weight
 * matrix is read once per step for all of them (continuous batching: a
 * decode token of each running sequence and a chunk of a new prompt can
 * share a step). Each sequence's results are those it gets alone. */
typedef struct lilac_batch lilac_batch;

/* For up to n_seq_max items per call, of sequences with contexts up to n_ctx_max. */
lilac_status lilac_batch_new(lilac_model *m, int n_seq_max, int n_ctx_max, lilac_batch **out, lilac_error *err);
void lilac_batch_free(lilac_batch *b);

typedef struct lilac_batch_item {
    lilac_seq *seq;
    const int32_t *tokens;
    int n;            /* >= 1 */
    bool want_logits; /* the logits after the item's last token */
    int top_k;        /* with want_logits, 1..LILAC_TOP_MAX: only the top_k best (lilac_batch_top), not the
                       * logits: on a GPU reduced there (lilac_sampler_top_k says how many a sampler needs) */
} lilac_batch_item;

/* Feed every item's tokens at its sequence's position (a sequence at most
 * once per call). Long items run in several internal steps. On an error
 * nothing has been evaluated. */
lilac_status lilac_batch_eval(lilac_batch *b, const lilac_batch_item *items, int n_items, lilac_error *err);
/* Item i's logits (n_vocab floats) from the last lilac_batch_eval, NULL
 * unless it asked for them; valid until the next call. */
float *lilac_batch_logits(lilac_batch *b, int i);
/* Item i's candidates from the last lilac_batch_eval, NULL unless it asked
 * for them (top_k); valid until the next call. */
const lilac_logits_top *lilac_batch_top(lilac_batch *b, int i);

/* ---- text: tokenizer and chat template --------------------------------- */

typedef struct lilac_tokenizer lilac_tokenizer;

/* A standalone tokenizer: a checkpoint directory (its tokenizer.json), a
 * tokenizer.json file, or a GGUF file. Free with lilac_tokenizer_free. */
lilac_status lilac_tokenizer_load(const char *path, lilac_tokenizer **out, lilac_error *err);
void lilac_tokenizer_free(lilac_tokenizer *t);
/* The model's own tokenizer (GGUF metadata or the checkpoint's
 * tokenizer.json), loaded on first use; owned by the model. */
lilac_status lilac_model_tokenizer(lilac_model *m, lilac_tokenizer **out, lilac_error *err);

/* Token ids of text (valid UTF-8), *ids malloc'd. parse_special: the text
 * of special tokens ("<|im_start|>") becomes those tokens. */
lilac_status lilac_tokenize(lilac_tokenizer *t, const char *text, size_t len, bool parse_special, int32_t **ids,
                            size_t *n_ids, lilac_error *err);
/* Text of ids as valid UTF-8 (ill-formed bytes as U+FFFD), *text malloc'd. */
lilac_status lilac_detokenize(const lilac_tokenizer *t, const int32_t *ids, size_t n, char **text,
                              lilac_error *err);
int32_t lilac_tokenizer_n_vocab(const lilac_tokenizer *t);
/* End of generation: EOS, <|im_end|>, <|endoftext|>. */
bool lilac_token_is_eog(const lilac_tokenizer *t, int32_t id);

/* The chat template the model ships (GGUF tokenizer.chat_template, or the
 * checkpoint's tokenizer_config.json / chat_template.jinja); NULL if none. */
const char *lilac_model_chat_template(lilac_model *m);

typedef struct lilac_chat_opts {
    bool add_generation_prompt;
    int thinking; /* -1: the template's default, 0: off, 1: on */
} lilac_chat_opts;

/* Render a conversation (JSON: an array of OpenAI-style messages, or an
 * object with "messages" and "tools") as the chat template does. Lilac
 * renders the Qwen3 and Qwen3.5/3.6 ChatML templates; others are refused.
 * *out malloc'd. */
lilac_status lilac_chat_render(const char *template_text, const char *conversation_json,
                               const lilac_chat_opts *opts, char **out, lilac_error *err);

/* ---- sampling ---------------------------------------------------------- */

/* The index of the largest of x[0..n), the first of equal ones: the greedy
 * token (n >= 1). */
int lilac_argmax(const float *x, int n);

/* Applied in this order: penalties on the logits; then, unless greedy,
 * temperature, top-k, top-p, min-p, and a draw from the renormalized
 * softmax of what is left. */
typedef struct lilac_sampler_params {
    float temperature;       /* <= 0: greedy (argmax after penalties) */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off; keep p >= min_p * p_max */
    float repeat_penalty;    /* 1: off; logit > 0 ? logit / r : logit * r (llama.cpp) */
    float presence_penalty;  /* 0: off; minus this once a token appeared (OpenAI) */
    float frequency_penalty; /* 0: off; minus this times the token's count (OpenAI) */
    int penalty_last_n;      /* tokens the penalties look back over; < 0: all */
    uint64_t seed;
} lilac_sampler_params;

lilac_sampler_params lilac_sampler_default_params(void);

typedef struct lilac_sampler lilac_sampler;

lilac_status lilac_sampler_new(const lilac_sampler_params *p, int n_vocab, lilac_sampler **out, lilac_error *err);
void lilac_sampler_free(lilac_sampler *s);
/* Forget the history (the penalties' window); the random state stays. */
void lilac_sampler_reset(lilac_sampler *s);
/* Add a token to the history the penalties see (prompt tokens too, if the
 * caller wants them penalized). */
void lilac_sampler_accept(lilac_sampler *s, int32_t token);

typedef struct lilac_token_logprob {
    int32_t token;
    float logprob; /* log-softmax of the model's logits after penalties */
} lilac_token_logprob;

/* Choose a token from logits (n_vocab floats; modified in place by the
 * penalties and the truncation). When top is non-NULL, the n_top most
 * likely tokens are written there, most likely first; *chosen_logprob
 * (if non-NULL) gets the chosen token's log-probability. The chosen token
 * is not accepted into the history: call lilac_sampler_accept. */
/* Candidates lilac_sampler_sample_top needs for this sampler and n_top
 * reported alternatives, or 0 where it needs every logit (penalties; top_k
 * off or over LILAC_TOP_MAX with temperature). */
int lilac_sampler_top_k(const lilac_sampler *s, int n_top);
/* lilac_sampler_sample from the top form (at least lilac_sampler_top_k
 * candidates): the same choice but where two logits round to one scaled
 * value at the top_k edge; the log-probabilities from its lse. */
int32_t lilac_sampler_sample_top(lilac_sampler *s, const lilac_logits_top *t, float *chosen_logprob,
                                 lilac_token_logprob *top, int n_top);
int32_t lilac_sampler_sample(lilac_sampler *s, float *logits, float *chosen_logprob, lilac_token_logprob *top,
                             int n_top);

/* Apply only the penalties (exposed for tests and for callers that sample
 * elsewhere). */
void lilac_sampler_apply_penalties(const lilac_sampler *s, float *logits);

/* ---- stop strings ------------------------------------------------------ */

/* Watches generated text for stop strings that may be split across
 * tokens: text that could still be the start of a stop string is held
 * back, text that cannot is released. */
typedef struct lilac_stop lilac_stop;

lilac_status lilac_stop_new(const char *const *stops, int n_stops, lilac_stop **out, lilac_error *err);
void lilac_stop_free(lilac_stop *st);
/* Feed the next piece of text. Returns true when a stop string completed;
 * *emit / *n_emit is the text safe to show now (valid until the next call):
 * everything before the stop string, never the stop string itself. */
bool lilac_stop_feed(lilac_stop *st, const char *text, size_t len, const char **emit, size_t *n_emit);
/* At the end of generation: the text still held back. */
void lilac_stop_flush(lilac_stop *st, const char **emit, size_t *n_emit);

/* ---- generation -------------------------------------------------------- */

typedef struct lilac_gen_params {
    int max_tokens;           /* new tokens at most; <= 0: until the context is full */
    const char *const *stop;  /* stop strings, matched across token boundaries */
    int n_stop;
    bool ignore_eos;          /* do not stop at end-of-generation tokens */
    int n_logprobs;           /* top log-probabilities reported per token (<= 20) */
} lilac_gen_params;

typedef enum lilac_finish {
    LILAC_FINISH_STOP = 0,      /* an end-of-generation token or a stop string */
    LILAC_FINISH_LENGTH = 1,    /* max_tokens reached */
    LILAC_FINISH_CONTEXT = 2,   /* the sequence's context is full */
    LILAC_FINISH_CANCELLED = 3, /* the callback asked to stop */
} lilac_finish;

/* One generated token: the text it completes (may be empty while a UTF-8
 * character or a possible stop string is pending). */
typedef struct lilac_gen_event {
    const char *text;
    size_t len;
    int32_t token;
    float logprob;
    const lilac_token_logprob *top;
    int n_top;
} lilac_gen_event;

/* Return false to stop generating (finish: cancelled). */
typedef bool (*lilac_gen_fn)(void *user, const lilac_gen_event *ev);

typedef struct lilac_gen_result {
    int n_prompt, n_generated;
    lilac_finish finish;
    double prompt_ms, gen_ms;
} lilac_gen_result;

/* Feed prompt (may be empty when the sequence already holds one) and
 * generate, streaming text through fn. Every token sampled, the last
 * included, is in the sequence afterwards, so a conversation can go on. */
lilac_status lilac_generate(lilac_seq *s, lilac_tokenizer *t, lilac_sampler *smp, const int32_t *prompt,
                            int n_prompt, const lilac_gen_params *p, lilac_gen_fn fn, void *user,
                            lilac_gen_result *res, lilac_error *err);

/* ---- evaluation -------------------------------------------------------- */

typedef struct lilac_eval_params {
    int n_ctx;      /* tokens per chunk; each chunk starts from an empty sequence */
    int score_from; /* score the predictions of positions >= this in each chunk
                       (llama.cpp's perplexity scores the second half) */
    lilac_model *ref_model;     /* reference to compare with, or NULL */
    const char *ref_logits;     /* or raw float32 logits of the same chunks, or NULL */
    const char *save_logits;    /* write this model's logits of the chunks here, or NULL */
} lilac_eval_params;

typedef struct lilac_eval_result {
    long n_scored;
    double nll_mean, ppl;      /* of the next token, over the scored positions */
    /* against the reference (NaN without one): KL(reference || model) */
    double kl_mean, kl_p99, kl_max;
    double top1;               /* fraction of positions with the same argmax */
    double ref_ppl;
    int n_chunks;
} lilac_eval_result;

/* Perplexity of tokens in chunks of n_ctx (the tail shorter than a chunk
 * is dropped) and, given a reference, KL divergence and top-1 agreement. */
lilac_status lilac_eval_tokens(lilac_model *m, const int32_t *tokens, int n_tokens, const lilac_eval_params *p,
                               lilac_eval_result *res, lilac_error *err);

/* ---- serving ----------------------------------------------------------- */

/* An OpenAI-compatible HTTP service (POST /v1/chat/completions,
 * /v1/completions, GET /v1/models, /health, /metrics) over a request
 * queue and n_parallel sequence slots decoded together. */
typedef struct lilac_serve_params {
    const char *model_path;
    const char *model_name;  /* as /v1/models lists it */
    const char *host;        /* NULL: 127.0.0.1 */
    int port;                /* 0: any free port (logged) */
    const char *api_key;     /* NULL or "": none */
    int n_parallel, n_ctx;   /* slots, and tokens per slot */
    int queue;               /* requests waiting at most; more get 429 */
    double queue_timeout_s;  /* waiting longer gets 503 (<= 0: no limit) */
    double grace_s;          /* SIGTERM: time running requests get to finish */
    int n_threads;
    int default_max_tokens;  /* when a request gives none (<= 0: until the context is full) */
    int max_connections;
    size_t cache_bytes;      /* prompt-state snapshots kept for prefix reuse */
    size_t max_body_bytes;   /* 0: 16 MiB */
    bool supervise;          /* a parent restarts the engine when it dies */
    bool precise;
} lilac_serve_params;

/* Serve until SIGTERM or SIGINT (then drain). Logs JSON lines on stderr. */
lilac_status lilac_serve(const lilac_serve_params *p, lilac_error *err);

/* Offline requests through the same scheduler: each line of in_path a chat
 * ("messages") or completion ("prompt") request with an "id"; each line of
 * out_path {"id", "response"} or {"id", "error"}, written (flushed) as it
 * completes. Started again on the same out_path it skips the ids already
 * there (a torn last line is cut off), so none is lost or done twice. */
typedef struct lilac_jobs_params {
    const char *model_path, *in_path, *out_path;
    int n_parallel, n_ctx, n_threads;
    int default_max_tokens;
    bool progress; /* a progress line on stderr */
    bool precise;
} lilac_jobs_params;

typedef struct lilac_jobs_result {
    int n_total, n_skipped, n_done, n_failed;
} lilac_jobs_result;

lilac_status lilac_jobs_run(const lilac_jobs_params *p, lilac_jobs_result *res, lilac_error *err);

#ifdef __cplusplus
}
#endif
#endif
