#!/usr/bin/env bash
# The decode LM head: k_mv_pipe (ring 0) against k_mv_ring (the default), and the opt-in 8 lanes a row
# (LILAC_CUDA_HEAD_LPR8=1: 2 rows a lane group in the ring's 8-row slots), after run.sh's build, test (its
# kernels and kernels-head-lpr8 labels: their "bench lm_head" lines) and synth steps:
#   - the tests' bench lines: the 35B-A3B's LM head shape alone;
#   - the LM head's us a token in the decode step (LILAC_CUDA_TIMING), each variant;
#   - tg128 alternated (run.sh tg);
#   - the ring's logits byte for byte against ring 0's (run.sh bits); 8 lanes a row sums in another order, so
#     for it the batched step's greedy tokens against each sequence's alone instead (--check-greedy).
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
for f in kernels kernels-head-lpr8; do
    [ -f "$out/$f.txt" ] && sed "s/^/$f: /" "$out/$f.txt" | grep "bench lm_head"
done
vs=("LILAC_CUDA_MV_RING=0" "LILAC_NONE=1" "LILAC_CUDA_HEAD_LPR8=1")
for _ in 1 2; do
    for v in "${vs[@]}"; do
        # shellcheck disable=SC2086 # v is a VAR=VALUE word
        echo "$v: $(env $v LILAC_CUDA_TIMING=1 timeout 120 "$build/lilac" bench -m "$synth" --backend cuda \
            -p 0 -n 32 -r 1 2>&1 | grep -i "lm_head" | head -1)"
    done
done
TG_VARIANTS="$(IFS=';'; echo "${vs[*]}")" TG_ROUNDS=${TG_ROUNDS:-2} bash "$root/bench/cuda/run.sh" tg
BITS_VARIANTS="LILAC_CUDA_MV_RING=0" bash "$root/bench/cuda/run.sh" bits
for P in 8 64; do
    echo "LILAC_CUDA_HEAD_LPR8=1 x$P: $(LILAC_CUDA_HEAD_LPR8=1 timeout 240 "$build/lilac" bench -m "$synth" --backend cuda \
        -p 0 -n 64 -P $P -r 1 --check-greedy 16 --json 2>&1 | grep -o '"tokens_per_s": [0-9.]*\|"sequences_differing": [0-9]*' |
        paste -sd' ')"
done
