/* The GPU memory plan (lilac_model_gpu_mem_report) on the tiny models,
 * without a GPU: the KV cache and the DeltaNet state against sizes worked
 * out here from the hyper-parameters, linear in the context and the
 * parallel sequences; the parts add up to the total; the sequence block
 * lilac_cuda_seq_new allocates is the plan's; max_ctx is the largest
 * halving of the trained context that fits a budget; without a device the
 * report says so and nothing fits; LILAC_GPU_MEM_LIMIT caps the budget; a
 * prefill chunk over PF_MAX tokens sizes the prefill buffers in the plan,
 * and the plan gives them PF_BIG rows where it fits with them, else
 * PF_MID's where those fit (LILAC_CUDA_PREFILL_AUTO, on by default; the
 * other checks run with it off, at PF_MAX rows). */
#include "engine/plan.h"
#include "kernels/cuda/cuda_sizes.h"
#include "model/cuda_mem.h"
#include "models.h"

/* Bytes of a sequence's KV cache and DeltaNet state on the device (float32), from the hyper-parameters. */
static void expect(const lilac_hparams *hp, int n_ctx, int n_par, uint64_t *kv, uint64_t *rec)
{
    *kv = *rec = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        if (hp->layer_kind[i] == LILAC_LAYER_ATTENTION) { /* K and V: n_ctx rows of n_head_kv heads */
            *kv += 2ull * (uint64_t)n_ctx * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * 4;
        } else { /* the conv's last kernel - 1 inputs of q, k, v; the state: a k_dim x v_dim matrix a v head */
            uint64_t channels = 2ull * hp->ssm_k_heads * hp->ssm_k_dim + (uint64_t)hp->ssm_v_heads * hp->ssm_v_dim;
            *rec += ((uint64_t)(hp->ssm_conv_kernel - 1) * channels +
                     (uint64_t)hp->ssm_v_heads * hp->ssm_k_dim * hp->ssm_v_dim) * 4;
        }
    }
    *kv *= (uint64_t)n_par;
    *rec *= (uint64_t)n_par;
}

static void test_model(const char *fx, const char *name)
{
    char path[8192];
    if (snprintf(path, sizeof path, "%s/%s/gguf/model-bf16.gguf", fx, name) >= (int)sizeof path)
        SKIP("fixtures path too long");
    lilac_model_params p = lilac_model_default_params();
    p.n_threads = 1;
    p.backend = LILAC_BACKEND_CPU; /* the plan needs no device */
    lilac_model *m = tm_open_with(path, &p);
    CHECK(m != NULL);
    if (!m)
        return;
    const lilac_hparams *hp = lilac_model_hparams(m);
    int n_attn = 0, n_dn = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        if (hp->layer_kind[i] == LILAC_LAYER_ATTENTION)
            n_attn++;
        else
            n_dn++;
    }
    printf("%s: %d layers (%d attention, %d DeltaNet), n_ctx_train %d\n", name, hp->n_layer, n_attn, n_dn,
           hp->n_ctx_train);

    const int ctxs[] = {256, 1000, 4096, 32768}, pars[] = {1, 3};
    for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++)
        for (size_t pi = 0; pi < sizeof pars / sizeof pars[0]; pi++) {
            int c = ctxs[ci], P = pars[pi];
            lilac_mem_report r = lilac_model_gpu_mem_report(m, c, P);
            uint64_t kv, rec;
            expect(hp, c, P, &kv, &rec);
            CHECK(r.gpu);
            CHECKF(r.kv == kv, "%s ctx %d x %d: KV %llu bytes, expected %llu", name, c, P, (unsigned long long)r.kv,
                   (unsigned long long)kv);
            CHECKF(r.recurrent == rec, "%s ctx %d x %d: recurrent %llu bytes, expected %llu", name, c, P,
                   (unsigned long long)r.recurrent, (unsigned long long)rec);
            CHECK(r.weights == lilac_model_weight_bytes(m));
            CHECK(r.total == r.weights + r.kv + r.recurrent + r.scratch + r.other);
            CHECK(r.scratch > 0 && r.other >= LILAC_CUDA_MARGIN_BASE);
            /* the block lilac_cuda_seq_new allocates: the plan's KV and state, and the attention's scores */
            lilac_cuda_seq_sizes s = lilac_cuda_seq_sizes_of(hp, c);
            CHECK((uint64_t)s.total * P == r.kv + r.recurrent + (uint64_t)hp->n_head * c * 4 * P);
            /* linear: twice the context, twice the KV cache and the same state; the scores in scratch */
            lilac_mem_report r2 = lilac_model_gpu_mem_report(m, 2 * c, P);
            CHECK(r2.kv == 2 * r.kv && r2.recurrent == r.recurrent);
            CHECK(r2.scratch - r.scratch == (uint64_t)hp->n_head * c * 4 * P + lilac_cuda_attn_split_bound(hp, 2 * c) -
                                                lilac_cuda_attn_split_bound(hp, c));
            /* the prefill attention's split K and V: a context's keys at least, once (not a sequence each) */
            const uint64_t split = lilac_cuda_attn_split_bound(hp, c);
            CHECK(n_attn == 0 || split >= lilac_cuda_attn_split_bytes((size_t)c, (size_t)hp->n_head_kv,
                                                                      (size_t)hp->head_dim));
            CHECK(n_attn > 0 || split == 0);
            CHECK(r2.weights == r.weights);
        }
    lilac_mem_report a = lilac_model_gpu_mem_report(m, 4096, 1), b = lilac_model_gpu_mem_report(m, 4096, 5);
    CHECK(b.kv == 5 * a.kv && b.recurrent == 5 * a.recurrent);
    CHECK(b.other - a.other == 4 * LILAC_CUDA_MARGIN_SEQ);
    CHECK(n_attn == 0 || a.kv > 0);
    CHECK(n_dn == 0 || a.recurrent > 0);
    CHECK(n_dn > 0 || a.recurrent == 0);

    /* max_ctx: the largest halving of the trained context whose plan fits the budget */
    int top = hp->n_ctx_train > 0 ? hp->n_ctx_train : 32768;
    for (int P = 1; P <= 2; P++)
        for (int c0 = top; c0 >= 512; c0 /= 4) {
            uint64_t need = lilac_model_gpu_mem_report_budget(m, c0, P, 0).total;
            lilac_mem_report r = lilac_model_gpu_mem_report_budget(m, c0, P, need);
            CHECKF(r.fits && r.max_ctx == c0, "%s: budget %llu: max_ctx %d, expected %d", name,
                   (unsigned long long)need, r.max_ctx, c0);
            r = lilac_model_gpu_mem_report_budget(m, c0, P, need - 1);
            CHECKF(!r.fits && r.max_ctx == c0 / 2, "%s: budget %llu - 1: max_ctx %d, expected %d", name,
                   (unsigned long long)need, r.max_ctx, c0 / 2);
            CHECK(!r.have_device && r.budget == need - 1);
        }
    lilac_mem_report z = lilac_model_gpu_mem_report_budget(m, 256, 1, 0);
    CHECK(!z.fits && z.max_ctx == 0);

    /* the device's answer: without one, a budget of 0 and why; with one, the limit caps it */
    lilac_mem_report d = lilac_model_gpu_mem_report(m, 4096, 1);
    printf("%s: device: %s (%s), GPU plan %.1f MiB\n", name, d.have_device ? "yes" : "no", d.device,
           d.total / 1048576.0);
    CHECK(d.device[0] != 0 && d.held == 0);
    if (!d.have_device)
        CHECK(d.budget == 0 && !d.fits && d.max_ctx == 0);
    setenv("LILAC_GPU_MEM_LIMIT", "1M", 1);
    d = lilac_model_gpu_mem_report(m, 4096, 1);
    CHECK(d.budget <= (1u << 20) && !d.fits);
    unsetenv("LILAC_GPU_MEM_LIMIT");

    /* the prefill chunk's buffers: PF_MAX rows for any smaller chunk (LILAC_CUDA_PREFILL_CHUNK), the chunk's
     * rows for a larger one, in the plan's scratch and in what pf_alloc takes (lilac_cuda_prefill_sizes) */
    const uint64_t s512 = lilac_cuda_prefill_sizes(hp, LILAC_CUDA_PF_MAX, NULL),
                   b512 = lilac_cuda_mma_scratch_bound(hp, LILAC_CUDA_PF_MAX);
    setenv("LILAC_CUDA_PREFILL_CHUNK", "7", 1);
    lilac_mem_report c7 = lilac_model_gpu_mem_report_budget(m, 4096, 1, 0);
    CHECK(lilac_cuda_pf_rows() == LILAC_CUDA_PF_MAX && c7.scratch == a.scratch);
    setenv("LILAC_CUDA_PREFILL_CHUNK", "2048", 1);
    lilac_mem_report c2k = lilac_model_gpu_mem_report_budget(m, 4096, 1, 0);
    const uint64_t s2k = lilac_cuda_prefill_sizes(hp, 2048, NULL), b2k = lilac_cuda_mma_scratch_bound(hp, 2048);
    CHECK(lilac_cuda_pf_rows() == 2048 && s2k > 3 * s512 && b2k > b512);
    CHECKF(c2k.scratch - a.scratch == (s2k - s512) + (b2k - b512), "%s: 2048-token chunks: scratch %llu, expected "
           "%llu more than 512's", name, (unsigned long long)(c2k.scratch - a.scratch),
           (unsigned long long)((s2k - s512) + (b2k - b512)));
    setenv("LILAC_CUDA_PREFILL_CHUNK", "100000", 1); /* past PF_LIMIT: the default */
    CHECK(lilac_cuda_pf_rows() == LILAC_CUDA_PF_MAX);
    unsetenv("LILAC_CUDA_PREFILL_CHUNK");

    /* LILAC_CUDA_PREFILL_AUTO (default on): PF_BIG rows where the whole plan fits with them, else PF_MAX; the
     * chunk's variable still wins; off: PF_MAX whatever the budget */
    CHECK(c7.pf_rows == LILAC_CUDA_PF_MAX && c2k.pf_rows == 2048);
    lilac_mem_report big = lilac_model_gpu_mem_report_budget(m, 4096, 1, UINT64_MAX);
    CHECK(big.pf_rows == LILAC_CUDA_PF_MAX && big.scratch == a.scratch);
    setenv("LILAC_CUDA_PREFILL_AUTO", "1", 1);
    big = lilac_model_gpu_mem_report_budget(m, 4096, 1, UINT64_MAX);
    const uint64_t sbig = lilac_cuda_prefill_sizes(hp, LILAC_CUDA_PF_BIG, NULL),
                   bbig = lilac_cuda_mma_scratch_bound(hp, LILAC_CUDA_PF_BIG);
    CHECKF(big.pf_rows == LILAC_CUDA_PF_BIG && big.scratch - a.scratch == (sbig - s512) + (bbig - b512),
           "%s: auto: %d rows, scratch %llu more", name, big.pf_rows, (unsigned long long)(big.scratch - a.scratch));
    lilac_mem_report edge = lilac_model_gpu_mem_report_budget(m, 4096, 1, big.total);
    CHECK(edge.fits && edge.pf_rows == LILAC_CUDA_PF_BIG);
    edge = lilac_model_gpu_mem_report_budget(m, 4096, 1, big.total - 1);
    const uint64_t smid = lilac_cuda_prefill_sizes(hp, LILAC_CUDA_PF_MID, NULL),
                   bmid = lilac_cuda_mma_scratch_bound(hp, LILAC_CUDA_PF_MID);
    CHECKF(edge.fits && edge.pf_rows == LILAC_CUDA_PF_MID && edge.total - a.total == (smid - s512) + (bmid - b512),
           "%s: auto, a byte short of the big chunk: %d rows, fits %d", name, edge.pf_rows, edge.fits);
    const uint64_t mid_total = edge.total;
    edge = lilac_model_gpu_mem_report_budget(m, 4096, 1, mid_total);
    CHECK(edge.fits && edge.pf_rows == LILAC_CUDA_PF_MID);
    edge = lilac_model_gpu_mem_report_budget(m, 4096, 1, mid_total - 1);
    CHECKF(edge.fits && edge.pf_rows == LILAC_CUDA_PF_MAX && edge.total == a.total,
           "%s: auto, a byte short of the middle chunk: %d rows, fits %d", name, edge.pf_rows, edge.fits);
    setenv("LILAC_CUDA_PREFILL_CHUNK", "1024", 1);
    edge = lilac_model_gpu_mem_report_budget(m, 4096, 1, UINT64_MAX);
    CHECK(edge.pf_rows == 1024);
    unsetenv("LILAC_CUDA_PREFILL_CHUNK");
    unsetenv("LILAC_CUDA_PREFILL_AUTO"); /* the default: on */
    edge = lilac_model_gpu_mem_report_budget(m, 4096, 1, UINT64_MAX);
    CHECK(edge.pf_rows == LILAC_CUDA_PF_BIG);
    setenv("LILAC_CUDA_PREFILL_AUTO", "0", 1);

    /* a model on the CPU is not held to the device's memory */
    lilac_error err;
    CHECK(lilac_model_mem_check(m, 256, 1, &err) == LILAC_OK);
    lilac_model_free(m);
}

int main(void)
{
    const char *fx = tu_require_fixtures();
    setenv("LILAC_CUDA_PREFILL_AUTO", "0", 1); /* PF_MAX rows unless a check asks for more */
    test_model(fx, "tiny-qwen35moe");
    test_model(fx, "tiny-qwen3moe");
    TEST_END();
}
