#!/usr/bin/env bash
# The decode LM head: k_mv_pipe (LILAC_CUDA_MV_RING=0) against k_mv_ring (the default), after run.sh's build,
# test (its kernels label: the "bench lm_head" lines) and synth steps:
#   - the kernels test's bench lines: the 35B-A3B's LM head shape alone, each ring configuration;
#   - the LM head's us a token in the decode step (LILAC_CUDA_TIMING), each variant;
#   - tg128 alternated (run.sh tg);
#   - the ring's logits byte for byte against ring 0's (run.sh bits).
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
[ -f "$out/kernels.txt" ] && grep "bench lm_head" "$out/kernels.txt"
vs=("LILAC_CUDA_MV_RING=0" "LILAC_NONE=1")
for _ in 1 2; do
    for v in "${vs[@]}"; do
        # shellcheck disable=SC2086 # v is a VAR=VALUE word
        echo "$v: $(env $v LILAC_CUDA_TIMING=1 timeout 120 "$build/lilac" bench -m "$synth" --backend cuda \
            -p 0 -n 32 -r 1 2>&1 | grep -i "lm_head" | head -1)"
    done
done
TG_VARIANTS="$(IFS=';'; echo "${vs[*]}")" TG_ROUNDS=${TG_ROUNDS:-2} bash "$root/bench/cuda/run.sh" tg
BITS_VARIANTS="LILAC_CUDA_MV_RING=0" bash "$root/bench/cuda/run.sh" bits
