#!/usr/bin/env bash
# Build lilac with CUDA, test the CUDA backend and measure it on the GPU
# machine (an H200 here). Everything it writes goes under OUT (default
# ./cuda-out): the build log, the test output, and bench JSON lines.
#
#   bench/cuda/run.sh [build|test|quick|synth|bench|ab|abold|gen|jobs|longjobs|pp|bits|blocks|tg|pdl|sanitize|suite|all|pack]...
#
# Fixtures: $LILAC_FIXTURES (a copy of ../shared/fixtures, or the subset
# bench/cuda/pack-fixtures.sh makes in .devfix). Libraries the machine lacks:
# bench/cuda/deps.sh puts them in .deps. With the device tool:
#   run(command="LILAC_FIXTURES=$PWD/.devfix bash bench/cuda/run.sh all", carry=[".devfix", ".deps"]) The 35B-A3B synthetic file is made on
# the machine itself (lilac synth, about a minute), at $SYNTH.
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(all)

do_build() {
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 &&
        cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1
    local rc=$?
    tail -5 "$out/build.log"
    grep -q "LILAC_CUDA=1\|-DLILAC_CUDA" "$build/CMakeFiles/lilac_core.dir/flags.make" 2>/dev/null ||
        echo "warning: this build has no CUDA (see $out/configure.log)"
    return $rc
}

# One CUDA test, its whole output in $out/LABEL.txt; printed: its summary
# line and first failures (the device tool returns only so much).
# TEST_ONLY: a regex of the labels to run (e.g. 'mma.*|prefill'), the rest passed over.
run_test() { # LABEL TEST [VAR=VALUE...]
    local label=$1 t=$2
    shift 2
    [[ -n "${TEST_ONLY:-}" && ! "$label" =~ ^(${TEST_ONLY})$ ]] && return 0
    env LILAC_REQUIRE_CUDA=1 "$@" timeout "${TEST_TIMEOUT:-180}" "$build/tests/$t" >"$out/$label.txt" 2>&1
    local rc=$?
    echo "$label: rc=$rc $(grep -E 'checks, [0-9]+ failed' "$out/$label.txt" | tail -1)"
    # the failed checks first (the tests' "max error" figures matched 'rror' and crowded them out), then errors
    grep -E 'FAIL' "$out/$label.txt" | head -5
    grep -E 'rror' "$out/$label.txt" | grep -vE 'FAIL|max (relative )?error' | head -3
}

do_test() {
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader | tee "$out/gpu.txt"
    # a kernel that hangs must not eat the session's device time: every test under a timeout
    run_test kernels test_cuda_kernels
    run_test kernels-t8 test_cuda_kernels LILAC_CUDA_MV_T8=1 LILAC_CUDA_NO_BENCH=1
    run_test kernels-block-norm test_cuda_kernels LILAC_CUDA_PF_WARP_NORM=0 LILAC_CUDA_NO_BENCH=1
    run_test kernels-no-gemm-split test_cuda_kernels LILAC_CUDA_GEMM_SPLIT=0 LILAC_CUDA_NO_BENCH=1
    run_test kernels-no-gemm-tc test_cuda_kernels LILAC_CUDA_GEMM_TC=0 LILAC_CUDA_NO_BENCH=1
    run_test kernels-down-sum-r1 test_cuda_kernels LILAC_CUDA_DOWN_SUM_R=1 LILAC_CUDA_NO_BENCH=1
    run_test kernels-no-stage test_cuda_kernels LILAC_CUDA_MV_STAGE=0 LILAC_CUDA_NO_BENCH=1
    run_test kernels-no-ds-stage test_cuda_kernels LILAC_CUDA_DS_STAGE=0 LILAC_CUDA_NO_BENCH=1
    run_test kernels-no-xvec test_cuda_kernels LILAC_CUDA_X_VEC=0 LILAC_CUDA_NO_BENCH=1
    run_test wgmma test_cuda_wgmma
    run_test sync test_cuda_sync
    run_test mma test_cuda_mma
    run_test mma-old-paths test_cuda_mma LILAC_CUDA_MMA_W8=0 LILAC_CUDA_MMA_XROWS=0
    run_test mma-prep-lane test_cuda_mma LILAC_CUDA_PREP_QUARTER=0
    run_test mma-no-narrow test_cuda_mma LILAC_CUDA_MMA_NARROW=0
    run_test mma-dense-nt4 test_cuda_mma LILAC_CUDA_MMA_DENSE_NT=4
    run_test mma-dense-nt2 test_cuda_mma LILAC_CUDA_MMA_DENSE_NT=2
    run_test mma-dense-nt1 test_cuda_mma LILAC_CUDA_MMA_DENSE_NT=1
    run_test mma-t16 test_cuda_mma LILAC_CUDA_MMA_T24=0
    run_test mma-t24-dense test_cuda_mma LILAC_CUDA_MMA_T24=2 LILAC_CUDA_MMA_DENSE_NT=4
    run_test mma-no-wtab test_cuda_mma LILAC_CUDA_MMA_WTAB=0
    run_test attn test_cuda_attn
    run_test attn-no-pre test_cuda_attn LILAC_CUDA_ATTN_PRE=0
    run_test attn-no-f16 test_cuda_attn LILAC_CUDA_ATTN_F16=0
    run_test attn-no-qsplit test_cuda_attn LILAC_CUDA_ATTN_F16=0 LILAC_CUDA_ATTN_QSPLIT=0
    run_test attn-v0 test_cuda_attn LILAC_CUDA_ATT_V2=0
    run_test dn test_cuda_dn
    run_test dn-block-norm test_cuda_dn LILAC_CUDA_PF_WARP_NORM=0
    run_test dn-narrow test_cuda_dn LILAC_CUDA_DN_WIDE=0 LILAC_CUDA_DN_TC=0
    run_test dn-no-tc test_cuda_dn LILAC_CUDA_DN_TC=0
    run_test dn-no-pf test_cuda_dn LILAC_CUDA_DN_PF=0
    run_test dn-dk-generic test_cuda_dn LILAC_CUDA_DN_DK=0
    run_test dn-reg0 test_cuda_dn LILAC_CUDA_DN_REG=0
    run_test route test_cuda_route
    run_test sample test_cuda_sample
    run_test model test_cuda_model
    run_test model-att-shape test_cuda_model LILAC_CUDA_ATT_RANGES=128 LILAC_CUDA_ATT_KEYS=16
    run_test model-ds-trigger0 test_cuda_model LILAC_CUDA_DS_TRIGGER=0
    run_test model-att-spread0 test_cuda_model LILAC_CUDA_ATT_SPREAD=0
    run_test model-att-v0 test_cuda_model LILAC_CUDA_ATT_V2=0
    run_test model-dn-reg0 test_cuda_model LILAC_CUDA_DN_REG=0
    run_test model-route-tail test_cuda_model LILAC_CUDA_ROUTE_TAIL=1
    run_test model-route-unfused test_cuda_model LILAC_CUDA_ROUTE_FUSED=0
    run_test model-no-stage test_cuda_model LILAC_CUDA_MV_STAGE=0
    run_test model-no-ds-stage test_cuda_model LILAC_CUDA_DS_STAGE=0
    run_test model-no-xvec test_cuda_model LILAC_CUDA_X_VEC=0
    run_test model-pdl-set test_cuda_model LILAC_CUDA_PDL_SET=route,attention,combine,rope,sum,conv,rmsnorm
    run_test model-mv-tc test_cuda_model LILAC_CUDA_MV_TC=1
    run_test model-mv-tc-auto test_cuda_model LILAC_CUDA_MV_TC=1 LILAC_CUDA_MV_TC_ROWS=0
    run_test model-mv-tc-min test_cuda_model LILAC_CUDA_MV_TC=1 LILAC_CUDA_MV_TC_MIN_ROWS=1000
    run_test model-apart test_cuda_model LILAC_CUDA_NORM_ROUTER=0 LILAC_CUDA_PDL_ALL=1 LILAC_CUDA_SUM_GRID=0
    run_test model-no-down-sum test_cuda_model LILAC_CUDA_DOWN_SUM=0
    run_test model-down-sum-r1 test_cuda_model LILAC_CUDA_DOWN_SUM=1 LILAC_CUDA_DOWN_SUM_R=1
    run_test batch test_cuda_batch
    run_test batch-graph test_cuda_batch LILAC_CUDA_BATCH_GRAPH=1
    run_test batch-att-spread0 test_cuda_batch LILAC_CUDA_ATT_SPREAD=0
    run_test batch-att-v0 test_cuda_batch LILAC_CUDA_ATT_V2=0
    run_test batch-dn-reg0 test_cuda_batch LILAC_CUDA_DN_REG=0
    run_test batch-grouped test_cuda_batch LILAC_CUDA_PAIRS=0
    run_test batch-t8 test_cuda_batch LILAC_CUDA_MV_T8=1
    run_test batch-no-down-sum test_cuda_batch LILAC_CUDA_DOWN_SUM=0
    run_test batch-sum-one-block test_cuda_batch LILAC_CUDA_DOWN_SUM=0 LILAC_CUDA_SUM_GRID=0
    run_test batch-no-norm-router test_cuda_batch LILAC_CUDA_NORM_ROUTER=0
    run_test batch-att-ranges test_cuda_batch LILAC_CUDA_ATT_KEYS=2
    run_test batch-down-sum-r1 test_cuda_batch LILAC_CUDA_DOWN_SUM_R=1
    run_test batch-route-unfused test_cuda_batch LILAC_CUDA_ROUTE_FUSED=0
    run_test batch-no-stage test_cuda_batch LILAC_CUDA_MV_STAGE=0
    run_test batch-no-ds-stage test_cuda_batch LILAC_CUDA_DS_STAGE=0
    run_test batch-no-xvec test_cuda_batch LILAC_CUDA_X_VEC=0
    run_test batch-mv-tc test_cuda_batch LILAC_CUDA_MV_TC=1
    run_test batch-mv-tc-auto test_cuda_batch LILAC_CUDA_MV_TC=1 LILAC_CUDA_MV_TC_ROWS=0
    run_test batch-mv-tc-min test_cuda_batch LILAC_CUDA_MV_TC=1 LILAC_CUDA_MV_TC_MIN_ROWS=1000
    run_test prefill test_cuda_prefill
    run_test prefill-dn-recurrent test_cuda_prefill LILAC_CUDA_DN_CHUNK=0
    run_test prefill-grouped test_cuda_prefill LILAC_CUDA_PAIRS=0
    run_test prefill-block-norm test_cuda_prefill LILAC_CUDA_PF_WARP_NORM=0
    run_test prefill-dn-narrow test_cuda_prefill LILAC_CUDA_DN_WIDE=0 LILAC_CUDA_DN_TC=0
    run_test prefill-dn-no-tc test_cuda_prefill LILAC_CUDA_DN_TC=0
    run_test prefill-dn-no-pf test_cuda_prefill LILAC_CUDA_DN_PF=0
    run_test prefill-ab-split test_cuda_prefill LILAC_CUDA_PF_AB=0
    run_test prefill-no-glu test_cuda_prefill LILAC_CUDA_PF_GLU=0
    run_test prefill-t24 test_cuda_prefill LILAC_CUDA_MMA_T24=2
    run_test prefill-no-gemm-split test_cuda_prefill LILAC_CUDA_GEMM_SPLIT=0
    run_test prefill-t16 test_cuda_prefill LILAC_CUDA_MMA_T24=0
    run_test prefill-no-aux test_cuda_prefill LILAC_CUDA_PF_AUX=0
    run_test prefill-no-wtab test_cuda_prefill LILAC_CUDA_MMA_WTAB=0
    run_test prefill-no-pre test_cuda_prefill LILAC_CUDA_ATTN_PRE=0
    run_test prefill-prep-lane test_cuda_prefill LILAC_CUDA_PREP_QUARTER=0
    run_test prefill-no-narrow test_cuda_prefill LILAC_CUDA_MMA_NARROW=0
    run_test batch-grouped-no-narrow test_cuda_batch LILAC_CUDA_PAIRS=0 LILAC_CUDA_MMA_NARROW=0
    run_test prefill-no-f16 test_cuda_prefill LILAC_CUDA_ATTN_F16=0
    run_test prefill-no-qsplit test_cuda_prefill LILAC_CUDA_ATTN_F16=0 LILAC_CUDA_ATTN_QSPLIT=0
    run_test batch-grouped-no-aux test_cuda_batch LILAC_CUDA_PAIRS=0 LILAC_CUDA_PF_AUX=0
    run_test batch-grouped-no-glu test_cuda_batch LILAC_CUDA_PAIRS=0 LILAC_CUDA_PF_GLU=0
    grep -h "wgmma probe" "$out"/wgmma.txt 2>/dev/null
    grep -h "^mvt .*max error\|bench mvt" "$out"/mma.txt 2>/dev/null
    grep -h "us a phase" "$out"/sync.txt 2>/dev/null
    grep -h "launches of the fused" "$out"/model-*.txt 2>/dev/null
    grep -h "vs token path\|sequences vs alone\|timing" "$out"/prefill.txt "$out"/batch.txt "$out"/attn.txt \
        "$out"/dn.txt 2>/dev/null | head -12
}

# The tests a change to the decode step's kernels must pass, without test's variants (a shorter call).
do_quick() {
    run_test kernels test_cuda_kernels LILAC_CUDA_NO_BENCH=1
    run_test route test_cuda_route
    run_test model test_cuda_model
    run_test attn test_cuda_attn
    run_test dn test_cuda_dn
    run_test batch test_cuda_batch
    run_test prefill test_cuda_prefill
}

do_synth() {
    [ -f "$synth" ] || "$build/lilac" synth --preset qwen3.6-35b-a3b --type Q4_K_M -o "$synth" 2>&1 | tail -2
    ls -la "$synth"
}

do_bench() {
    local T="timeout ${BENCH_TIMEOUT:-240}"
    $T "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 128 -r 3 --json 2>&1 | tee -a "$out/bench.jsonl"
    $T "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 128 -d 8192 -r 2 --json 2>&1 | tee -a "$out/bench.jsonl"
    $T "$build/lilac" bench -m "$synth" --backend cuda -p 512 -n 0 -r 2 --json 2>&1 | tee -a "$out/bench.jsonl"
    $T "$build/lilac" bench -m "$synth" --backend cuda -p 4096 -n 0 -r 2 --json 2>&1 | tee -a "$out/bench.jsonl"
    for P in 8 32 64; do # batched decode, and each sequence's greedy tokens against its own alone
        $T "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 64 -P $P -r 1 --check-greedy 16 --json 2>&1 |
            tee -a "$out/bench.jsonl"
    done
    for P in 8 32 64; do # the same with the faster batched step whose sums take other orders
        LILAC_CUDA_BATCH_EXACT=0 $T "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 64 -P $P -r 1 \
            --check-greedy 16 --json 2>&1 | sed 's/^/BATCH_EXACT=0 /' | tee -a "$out/bench.jsonl"
    done
}

# (tg: tg128 under each switch set of TG_VARIANTS, ';' apart, alternated TG_ROUNDS times, default 1.)
# tg128 of this tree against an older one, alternated on one machine (H200s differ by up to 15 %): the older
# tree as a tar in .ab/old.tar (carried), e.g. `mkdir -p .ab && git archive -o .ab/old.tar HEAD CMakeLists.txt src include` before
# the change; built into /tmp/lilac-old (lilac alone). AB_VARIANTS: switch sets for this tree's runs, ';' apart.
old=/tmp/lilac-old
build_old() { # the tree in .ab/old.tar into $old/b/lilac (once a machine)
    [ -f "$root/.ab/old.tar" ] || { echo "no .ab/old.tar"; return 1; }
    [ -x "$old/b/lilac" ] && return 0
    mkdir -p "$old" && tar -xf "$root/.ab/old.tar" -C "$old" &&
        cmake -S "$old" -B "$old/b" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >"$out/old-configure.log" 2>&1 &&
        cmake --build "$old/b" -j"$(nproc)" --target lilac >"$out/old-build.log" 2>&1 ||
        { echo "the old tree did not build (old-build.log)"; tail -3 "$out/old-build.log"; return 1; }
}

do_abold() {
    local T="timeout ${BENCH_TIMEOUT:-120}" i v
    build_old || return 1
    for i in 1 2; do
        echo "tg128 old${AB_DEPTH:+ at depth $AB_DEPTH}: $($T "$old/b/lilac" bench -m "$synth" --backend cuda -p 0 -n 128 \
            -d "${AB_DEPTH:-0}" -r 2 --json 2>&1 | grep -o '"tokens_per_s": [0-9.]*\|rror.*')"
        IFS=';' read -ra v <<<"${AB_VARIANTS:-}"
        tg128_each LILAC_NONE=1 "${v[@]}"
    done
}

# (AB_DEPTH=N: tg128 after N tokens of context, for abold and tg alike.)

# lilac batch by BIN over the requests in IN with the environment words V and the options after: its exit status,
# the requests answered and the wall seconds (the model's load included) in batch_rc, batch_n and batch_s.
batch_timed() {
    local v=$1 bin=$2 in=$3 out=/tmp/lilac-batch-out.jsonl t0 t1
    shift 3
    rm -f "$out"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086 # v is one or more VAR=VALUE words
    env $v timeout "${BENCH_TIMEOUT:-240}" "$bin" batch -m "$synth" -i "$in" -o "$out" "$@" >/dev/null 2>"$out.err"
    batch_rc=$?
    t1=$(date +%s.%N)
    batch_n=$(grep -c '"response"' "$out" 2>/dev/null)
    batch_s=$(awk "BEGIN { print $t1 - $t0 }")
    [ "$batch_rc" = 0 ] || { tail -2 "$out.err"; grep -m1 '"error"' "$out" 2>/dev/null | cut -c1-300; }
}

# The scheduler's path (lilac batch: the server's continuous batching offline): JOBS requests (default 32) of 32
# tokens, default sampling, all in parallel, by this tree and (where built) the old one: wall seconds and
# generated tokens a second. Needs build and synth.
do_jobs() {
    local bin i n=${JOBS:-32}
    for ((i = 0; i < n; i++)); do echo "{\"id\": \"r$i\", \"prompt\": \"Request $i: tell me about\", \"max_tokens\": 32}"; done \
        >/tmp/lilac-jobs.jsonl
    for bin in "$build/lilac" "$old/b/lilac"; do
        [ -x "$bin" ] || continue
        batch_timed LILAC_NONE=1 "$bin" /tmp/lilac-jobs.jsonl --parallel "$n" --max-tokens 32
        echo "jobs ${bin#"$root"/}: rc=$batch_rc, $batch_n of $n answered in \
$(awk "BEGIN { printf \"%.2f s (%.1f tok/s incl. load and prefill)\", $batch_s, $n * 32 / $batch_s }")"
    done
}

# Long prompts through the scheduler (lilac batch, one slot): LONGJOBS requests (default 8) of 3,000 bytes, one
# token each, with the prompt steps as the scheduler now takes them (the GPU prefill's chunk) and at 256 tokens
# (LILAC_SCHED_PROMPT_STEP=256, what it took before session 18): wall seconds each, the model's load included.
do_longjobs() {
    local i n=${LONGJOBS:-8} v words
    # 3,000 bytes: 3,000 tokens in the synthetic file's byte-level vocabulary (a real tokenizer makes ~750)
    words=$(for ((i = 0; i < 750; i++)); do printf 'the '; done)
    for ((i = 0; i < n; i++)); do echo "{\"id\": \"l$i\", \"prompt\": \"$i $words\", \"max_tokens\": 1}"; done \
        >/tmp/lilac-longjobs.jsonl
    for v in LILAC_NONE=1 LILAC_SCHED_PROMPT_STEP=256 LILAC_NONE=1 LILAC_SCHED_PROMPT_STEP=256; do
        batch_timed "$v" "$build/lilac" /tmp/lilac-longjobs.jsonl --parallel 1 --ctx 8192
        echo "longjobs $v: rc=$batch_rc, $batch_n of $n answered in $(awk "BEGIN { printf \"%.2f s\", $batch_s }")"
    done
}

# Generation as a user runs it (lilac run: the sampler on the host, the logits downloaded every token), 128
# tokens with the default sampling and greedy, by this tree and, where abold/old built it, the older one: the
# "generated ... tok/s" line of each. Needs build and synth.
do_gen() {
    local T="timeout ${BENCH_TIMEOUT:-120}" bin how
    for bin in "$build/lilac" "$old/b/lilac"; do
        [ -x "$bin" ] || continue
        for how in "" "--temp 0"; do
            # shellcheck disable=SC2086 # how is zero or more words
            echo "run ${bin#"$root"/} ${how:-default sampling}: $($T "$bin" run -m "$synth" --backend cuda --raw -p "Hello" \
                -n 128 --seed 1 $how 2>&1 >/dev/null | grep -o 'generated [0-9]* tokens in [0-9]* ms ([0-9.]* tok/s)\|rror.*')"
        done
    done
}

# pp512 with each prefill switch off in turn, against all on (one run each, the same machine): which of them
# pays. Needs build and synth.
do_ab() {
    local T="timeout ${BENCH_TIMEOUT:-240}" v
    for v in NONE LILAC_CUDA_DN_KQ LILAC_CUDA_GEMM LILAC_CUDA_GEMM_TC LILAC_CUDA_MMA_W8 LILAC_CUDA_MMA_XROWS \
        LILAC_CUDA_PF_GU LILAC_CUDA_ATTN_MMA LILAC_CUDA_MMA; do
        echo "$v=0: $(env "$v=0" $T "$build/lilac" bench -m "$synth" --backend cuda -p 512 -n 0 -r 2 --json 2>/dev/null |
            grep -o '"tokens_per_s": [0-9.]*')"
    done
    # the prefill's delta rule recurrent, pp512
    echo "LILAC_CUDA_DN_CHUNK=0: $(LILAC_CUDA_DN_CHUNK=0 $T "$build/lilac" bench -m "$synth" --backend cuda -p 512 -n 0 \
        -r 2 --json 2>/dev/null | grep -o '"tokens_per_s": [0-9.]*')"
    for P in 8 64; do # batched decode as a graph a row count (opt-in)
        for v in NONE LILAC_CUDA_BATCH_GRAPH=1 LILAC_CUDA_MV_T8=1 LILAC_CUDA_MMA=0; do
            echo "tg32x$P $v: $(env "${v/NONE/LILAC_NONE=1}" $T "$build/lilac" bench -m "$synth" --backend cuda -p 0 \
                -n 32 -P $P -r 1 --json 2>/dev/null | grep "x$P" | grep -o '"tokens_per_s": [0-9.]*')"
        done
    done
    # decode's switches of the default path, tg128 (the opt-in fusions: TG_VARIANTS with the tg step)
    tg128_each LILAC_NONE=1 LILAC_CUDA_ROUTE_TAIL=1 LILAC_CUDA_SUM_GRID=0 LILAC_CUDA_PDL_ALL=1 \
        LILAC_CUDA_NORM_ROUTER=0
}

# pp512 and pp4096 under each switch set of PP_VARIANTS (';' apart), alternated PP_ROUNDS times (default 2):
# prefill switches against one another on one machine. PP_SIZES overrides "512 4096". The variant OLD is the
# tree in .ab/old.tar (abold's), built first.
do_pp() {
    local T="timeout ${BENCH_TIMEOUT:-120}" v r p vs bin
    IFS=';' read -ra vs <<<"${PP_VARIANTS:-LILAC_NONE=1}"
    [[ ";${PP_VARIANTS:-};" == *";OLD;"* ]] && { build_old || return 1; }
    for r in $(seq "${PP_ROUNDS:-2}"); do
        for p in ${PP_SIZES:-512 4096}; do
            for v in "${vs[@]}"; do
                bin=$build/lilac
                [ "$v" = OLD ] && bin=$old/b/lilac v=LILAC_NONE=1
                # shellcheck disable=SC2086 # v is one or more VAR=VALUE words
                echo "pp$p ${bin#"$root"/} $v (round $r): $(env $v $T "$bin" bench -m "$synth" --backend cuda -p "$p" -n 0 \
                    -r 2 --json 2>&1 | grep -o '"tokens_per_s": [0-9.]*\|rror.*')"
            done
        done
    done
}

# bits: the decode step's logits of the 35B-A3B file (8 steps, lilac logits --step) under each switch set of
# BITS_VARIANTS (';' apart) against the default's, byte for byte ("equal" or cmp's first difference); the
# variant OLD is the tree in .ab/old.tar. The check that a change meant to keep the bits keeps them.
do_bits() {
    local T="timeout ${BENCH_TIMEOUT:-90}" v vs bin d toks=${BITS_TOKENS:-11,2222,333,44,5555,66,777,8888}
    IFS=';' read -ra vs <<<"${BITS_VARIANTS:-OLD}"
    [[ ";${BITS_VARIANTS:-OLD};" == *";OLD;"* ]] && { build_old || return 1; }
    $T "$build/lilac" logits -m "$synth" --backend cuda --tokens "$toks" --step -o "$out/bits-default.f32" \
        >"$out/bits-default.log" 2>&1 || { echo "bits: the default run failed"; tail -3 "$out/bits-default.log"; return 1; }
    for v in "${vs[@]}"; do
        bin=$(bin_of "$v")
        [ "$v" = OLD ] && bin=$old/b/lilac v=LILAC_NONE=1
        # shellcheck disable=SC2086 # v is one or more VAR=VALUE words
        env $v $T "$bin" logits -m "$synth" --backend cuda --tokens "$toks" --step -o "$out/bits-v.f32" \
            >"$out/bits-v.log" 2>&1 || { echo "bits ${bin#"$root"/} $v: the run failed"; tail -3 "$out/bits-v.log"; continue; }
        d=$(cmp "$out/bits-default.f32" "$out/bits-v.f32" 2>&1)
        echo "bits ${bin#"$root"/} $v: ${d:-equal}"
    done
    rm -f "$out/bits-default.f32" "$out/bits-v.f32"
}

# blocks: the per-block trace of layer TRACE_LAYER (default 4, a DeltaNet layer) over a 16-token decode under each
# switch set of TRACE_VARIANTS (';' apart): a line a launch, the quantiles of its blocks' start, wait return,
# marks and end (us; LILAC_CUDA_TRACE_BLOCKS), cut to fit the device tool's output.
do_blocks() {
    local T="timeout ${BENCH_TIMEOUT:-90}" v vs
    IFS=';' read -ra vs <<<"${TRACE_VARIANTS:-LILAC_NONE=1}"
    for v in "${vs[@]}"; do
        # shellcheck disable=SC2086 # v is one or more VAR=VALUE words
        env $v LILAC_CUDA_TRACE=1 LILAC_CUDA_TRACE_BLOCKS="${TRACE_LAYER:-4}" LILAC_CUDA_TRACE_FILE="$out/blocks.txt" \
            $T "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 16 -r 1 >"$out/blocks.log" 2>&1 ||
            { echo "blocks $v: the run failed"; tail -3 "$out/blocks.log"; continue; }
        echo "== blocks of layer ${TRACE_LAYER:-4}, $v"
        grep '^cuda trace blocks' "$out/blocks.txt" | sed 's/cuda trace blocks: //' | cut -c1-"${TRACE_COLS:-330}"
    done
}

# tg128 with each set of VAR=VALUE words given, one run each (needs build and synth): tokens/s or the error.
# The binary a switch set runs: LILAC_BIN=NAME in it, $build/NAME (another build packed beside lilac:
# CARRY_BINS in carry-pack.sh, e.g. lilac-ef from a build with -DLILAC_CUDA_L2_EF=1); else $build/lilac.
bin_of() { # VARIANT
    local b=$build/lilac
    [[ " $1 " =~ \ LILAC_BIN=([^ ]+)\  ]] && b=$build/${BASH_REMATCH[1]}
    echo "$b"
}

tg128_each() {
    local T="timeout ${BENCH_TIMEOUT:-120}" v
    for v in "$@"; do
        # shellcheck disable=SC2086 # v is one or more VAR=VALUE words
        echo "tg128 $v${AB_DEPTH:+ at depth $AB_DEPTH}: $(env $v $T "$(bin_of "$v")" bench -m "$synth" --backend cuda \
            -p 0 -n 128 -d "${AB_DEPTH:-0}" -r 2 --json 2>&1 |
            grep -o '"tokens_per_s": [0-9.]*\|"weights_gb_s": [0-9.]*\|rror.*' | paste -sd' ')" # GB/s: of 4,800 on an H200
    done
}

# The CPU suite's golden tests with the backend forced to CUDA (the issue's "the golden tests pass on the GPU
# with the CPU's bounds"), over the fixtures carried: one pack at a time (pack-fixtures.sh --suite PACK), with
# LILAC_TEST_MODELS naming its model, e.g.
#   LILAC_FIXTURES=$PWD/.devfix-golden-35 LILAC_TEST_MODELS=tiny-qwen35moe bash bench/cuda/run.sh build suite
# (carry .devfix-golden-35 and .deps).
do_suite() {
    local t
    for t in ${SUITE_TESTS:-test_golden test_quant_models}; do
        [ "$t" = test_golden ] && ! compgen -G "${LILAC_FIXTURES:-$root/../shared/fixtures}/*/hf" >/dev/null &&
            echo "test_golden: no HF checkpoint under ${LILAC_FIXTURES:-../shared/fixtures} (carry a suite pack:" \
                "bench/cuda/pack-fixtures.sh --suite golden-35, LILAC_FIXTURES=\$PWD/.devfix-golden-35)"
        LILAC_BACKEND=cuda timeout "${TEST_TIMEOUT:-300}" "$build/tests/$t" >"$out/suite-$t.txt" 2>&1
        echo "$t (backend cuda, ${LILAC_TEST_MODELS:-every model}): rc=$? $(grep -E 'checks, [0-9]+ failed|SKIP' \
            "$out/suite-$t.txt" | tail -1)"
        grep -E 'FAIL|rror' "$out/suite-$t.txt" | head -8
        grep -E 'vs golden|vs transformers|mean KL|decode vs prefill' "$out/suite-$t.txt" | head -12
    done
}

# tg128 with each small kernel class launched dependent alone (LILAC_CUDA_PDL_SET; all of them at once was
# slower: 234 against 258), against none.
do_pdl() {
    tg128_each LILAC_NONE=1 LILAC_CUDA_PDL_SET=route LILAC_CUDA_PDL_SET=attention,combine,rope \
        LILAC_CUDA_PDL_SET=sum LILAC_CUDA_PDL_SET=conv LILAC_CUDA_PDL_SET=rmsnorm \
        LILAC_CUDA_PDL_SET=route,attention,combine,rope
}

# compute-sanitizer memcheck and racecheck over the CUDA tests (the issue's
# bar), each bounded so that a slow tool cannot eat the session's device
# time.
# A sanitizer job's summary line, once the job (pid) has ended; printed once (its .rc file then removed).
san_summary() { # PID NAME
    wait "$1"
    [ -f "$out/san-$2.rc" ] && cat "$out/san-$2.rc" && rm -f "$out/san-$2.rc"
    # a test that skipped proved nothing (most often: no LILAC_FIXTURES in the sanitize step's environment)
    if grep -q '^SKIP:' "$out/san-$2.txt" 2>/dev/null; then
        echo "  $2 skipped (LILAC_FIXTURES=${LILAC_FIXTURES:-unset}): $(grep '^SKIP:' "$out/san-$2.txt" | head -1)"
    fi
    return 0
}

do_sanitize() {
    local cs
    cs=$(cuda_tool compute-sanitizer)
    [ -n "$cs" ] || { echo "no compute-sanitizer on this machine"; return 1; }
    # SAN_TOOLS, SAN_TESTS: a subset (racecheck needs minutes a test: split it over calls; racecheck of
    # test_cuda_kernels ran past 80 s: LILAC_CUDA_TEST_PARTS=down_sum (or matvec, norm, refusals, like) runs a part;
    # test_cuda_batch past 90 s: LILAC_CUDA_TEST_PARTS=exact (or fast, each with x64 for the 64-sequence runs))
    # (test_cuda_trace makes no CUDA call: the sanitizer ends it with rc 255 before any.)
    # SAN_PAR=1: every (tool, test) pair at once, each its own process on the one GPU (racecheck's minutes a test
    # overlap; 16 cores), the summaries printed once all have ended, in order.
    # An entry TEST:PARTS runs those parts of the test alone (LILAC_CUDA_TEST_PARTS=PARTS), e.g. test_cuda_kernels:pipe;
    # TEST:PARTS:TYPES those types too (LILAC_CUDA_TEST_TYPES; test_cuda_kernels), e.g. test_cuda_kernels:matvec:Q6_K.
    # racecheck's runs of test_cuda_model and test_cuda_batch take SAN_TOKENS tokens (default 3; LILAC_CUDA_TEST_TOKENS:
    # the model's first ones, the batch's decode steps a sequence).
    local pids=() names=() tool e t parts types n i tok
    for tool in ${SAN_TOOLS:-memcheck racecheck}; do
        tok=
        [ "$tool" = racecheck ] && tok=${SAN_TOKENS:-3}
        for e in ${SAN_TESTS:-test_cuda_kernels test_cuda_mma test_cuda_attn test_cuda_dn test_cuda_route test_cuda_sample test_cuda_model test_cuda_prefill test_cuda_batch test_cuda_wgmma test_cuda_sync}; do
            t=${e%%:*} parts= types= n=$tool-$t
            [[ $e == *:* ]] && parts=${e#*:}
            [[ $parts == *:* ]] && types=${parts#*:} parts=${parts%%:*}
            [ -n "$parts" ] && n=$n-${parts//,/+}
            [ -n "$types" ] && n=$n-${types//,/+}
            (
                env LILAC_REQUIRE_CUDA=1 LILAC_CUDA_GRAPH=0 LILAC_CUDA_TEST_QUICK=1 LILAC_CUDA_NO_BENCH=1 \
                    ${parts:+LILAC_CUDA_TEST_PARTS=$parts} ${types:+LILAC_CUDA_TEST_TYPES=$types} \
                    ${tok:+LILAC_CUDA_TEST_TOKENS=$tok} timeout "${SAN_TIMEOUT:-60}" \
                    "$cs" --tool $tool --error-exitcode 3 \
                    "$build/tests/$t" >"$out/san-$n.txt" 2>&1
                echo "$tool $e: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san-$n.txt" | tail -1)" \
                    >"$out/san-$n.rc"
            ) &
            pids+=($!) names+=("$n")
            [ "${SAN_PAR:-0}" = 1 ] || san_summary "${pids[-1]}" "$n" # one at a time: each summary as it ends
        done
    done
    for i in "${!pids[@]}"; do
        san_summary "${pids[$i]}" "${names[$i]}"
    done
}

# Everything under OUT into OUT/all.tgz: the device tool brings back at most 8 files (run it last).
do_pack() {
    local t
    t=$(mktemp /tmp/lilac-out.XXXXXX.tgz) && tar -czf "$t" -C "$out" . && find "$out" -mindepth 1 -delete &&
        mv "$t" "$out/all.tgz" && ls -la "$out/all.tgz"
}

for s in "${steps[@]}"; do
    case $s in
    build) do_build ;;
    test) do_test ;;
    quick) do_quick ;;
    synth) do_synth ;;
    bench) do_bench ;;
    sanitize) do_sanitize ;;
    suite) do_suite ;;
    pdl) do_pdl ;;
    ab) do_ab ;;
    abold) do_abold ;;
    pack) do_pack ;;
    gen) do_gen ;;
    jobs) do_jobs ;;
    pp) do_pp ;;
    bits) do_bits ;;
    blocks) do_blocks ;;
    longjobs) do_longjobs ;;
    old) build_old ;;
    tg) IFS=';' read -ra tv <<<"${TG_VARIANTS:-LILAC_NONE=1}" && for _ in $(seq "${TG_ROUNDS:-1}"); do tg128_each "${tv[@]}"; done ;;
    all) do_build && do_test && do_synth && do_bench ;;
    *) echo "usage: $0 [build|test|quick|synth|bench|ab|abold|gen|jobs|longjobs|pp|bits|blocks|tg|pdl|sanitize|suite|all|pack]..." >&2; exit 2 ;;
    esac
done
