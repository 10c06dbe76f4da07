#!/usr/bin/env bash
# One decode step's timeline (LILAC_CUDA_TRACE=1) under each of the given
# switch sets, for comparing a fusion with the chain it replaces: per set, the
# step's summary and the rows of layer 4 (a DeltaNet layer past the first
# attention one). Whole tables in OUT/trace-N.txt. Needs run.sh build, synth.
# TRACE_DEPTH=N: the steps after N tokens of context (default 0).
#
#   bench/cuda/trace-variants.sh "LILAC_NONE=1" "LILAC_CUDA_DOWN_SUM=0" ...
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
i=0
for v in "$@"; do
    i=$((i + 1))
    f=$out/trace-$i.txt
    echo "== $v"
    # shellcheck disable=SC2086 # v is one or more VAR=VALUE words
    env $v LILAC_CUDA_TRACE=1 LILAC_CUDA_TRACE_FILE="$f" timeout "${TRACE_TIMEOUT:-90}" \
        "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 16 -d "${TRACE_DEPTH:-0}" -r 1 >"$out/trace-$i.log" 2>&1 ||
        { echo "run failed:"; tail -5 "$out/trace-$i.log"; }
    grep -h '^cuda:' "$out/trace-$i.log" | head -3
    if [ -s "$f" ]; then
        grep '^cuda trace: call\|^cuda trace: step\|^cuda trace: .* launches,' "$f"
        awk '$2 == 4' "$f" | cut -c1-110
        python3 "$(dirname "$0")/trace_budget.py" "$f" # a layer's chain, launch by launch
    else
        echo "no trace table"
    fi
done
