#!/usr/bin/env bash
# The decode LM head through k_mv_pipe against k_mv_ring's configurations (session 30), after run.sh's build,
# test (the kernels label: its "bench lm_head" lines) and synth steps:
#   - the kernels test's lines: the 35B-A3B's LM head shape alone, each configuration (RING_BEST: the fastest);
#   - the LM head's us a token in the decode step (LILAC_CUDA_TIMING) under ring 0 and RING_BEST;
#   - tg128 alternated (run.sh tg) and the step's logits byte for byte (run.sh bits) of the two.
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
grep "bench lm_head" "$out/kernels.txt" || { echo "no bench lm_head lines in $out/kernels.txt"; exit 1; }
best=${RING_BEST:-$(awk '/bench lm_head/ && $8 != "0:" { r = $8; sub(":", "", r); if (b == "" || $9 + 0 < bt) { b = r; bt = $9 + 0 } }
    END { print b }' "$out/kernels.txt")}
echo "ring best: $best"
for c in 0 "$best" 0 "$best"; do
    echo "ring $c: $(LILAC_CUDA_MV_RING=$c LILAC_CUDA_TIMING=1 timeout 120 "$build/lilac" bench -m "$synth" --backend cuda \
        -p 0 -n 32 -r 1 2>&1 | grep -i "lm_head" | head -2 | tr '\n' ' ')"
done
TG_VARIANTS="LILAC_CUDA_MV_RING=0;LILAC_CUDA_MV_RING=$best" TG_ROUNDS=${TG_ROUNDS:-2} bash "$root/bench/cuda/run.sh" tg
BITS_VARIANTS="LILAC_CUDA_MV_RING=$best" bash "$root/bench/cuda/run.sh" bits
