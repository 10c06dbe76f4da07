#!/usr/bin/env bash
# Where a CUDA decode step spends its time, on the GPU machine: the kernels'
# summed GPU time from nsys (when the machine has it), the per-operation
# table of LILAC_CUDA_TIMING=1 (each op synchronized: host-side overhead
# included, so small ops look dearer than they are), and the timeline of one
# replayed graph step as the kernels record it (LILAC_CUDA_TRACE=1: each
# launch's start, duration, griddepcontrol.wait and gap; OUT/trace.txt).
# Needs bench/cuda/run.sh build and synth first; writes under OUT.
#
#   bench/cuda/profile.sh [TOKENS]
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
n=${1:-64}
nsys=$(cuda_tool nsys /opt/nvidia/nsight-systems/*/bin/nsys)
if [ -n "$nsys" ]; then
    "$nsys" profile -t cuda --cuda-graph-trace=node -o "$out/decode" -f true \
        "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n "$n" -r 1 >"$out/nsys.log" 2>&1
    "$nsys" stats -q --report cuda_gpu_kern_sum --format csv "$out/decode.nsys-rep" >"$out/kern_sum.csv" 2>&1
    head -40 "$out/kern_sum.csv" | cut -c1-220
else
    echo "no nsys on this machine"
fi
LILAC_CUDA_TIMING=1 "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n "$n" -r 1 2>&1 | tail -30
# the batched step's sections (P sequences; "pf ..." rows of the same table), each synchronized
LILAC_CUDA_TIMING=1 "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 8 -r 1 -P "${P:-64}" 2>&1 | grep "cuda op pf"
# the kernels' own timeline of one step (the 8th): the whole table in trace.txt, its head and totals here
LILAC_CUDA_TRACE=1 LILAC_CUDA_TRACE_FILE="$out/trace.txt" \
    "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 16 -r 1 >"$out/trace.log" 2>&1 ||
    { echo "trace run failed:"; tail -20 "$out/trace.log"; }
if [ -s "$out/trace.txt" ]; then
    head -30 "$out/trace.txt"
    echo "..."
    grep '^cuda trace: step\|^cuda trace: .*names' "$out/trace.txt"
else
    echo "no trace table (see $out/trace.log)"
    grep 'cuda trace' "$out/trace.log"
fi
