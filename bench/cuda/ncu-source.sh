#!/usr/bin/env bash
# Where a decode-step kernel's warps spend their time, instruction by instruction: ncu's SourceCounters
# (warp stall samples a SASS instruction) for one launch of each named kernel, exported as CSV to
# OUT/sass-KERNEL.csv, and the instructions with the most samples printed. Needs run.sh build and synth.
#
#   bench/cuda/ncu-source.sh [KERNEL[:SKIP]...]    (env: any LILAC_CUDA_* switches; default k_route)
# NCU_BENCH: the bench's arguments (default a decode: -p 0 -n 16; a prefill: "-p 512 -n 0"). NCU_DEMANGLED=1:
# KERNEL is a regex over demangled names (template arguments: 'k_mma<12, (true|false), 1, true>').
# NCU_PROG: another program to profile instead of the bench (e.g. a test, "$PWD/build-cuda/tests/test_cuda_mma"
# with LILAC_CUDA_BENCH_ONLY=1 for its decode-product bench alone: no synth needed). NCU_GZIP=1: the CSV gzipped
# (the device tool returns files of limited size). Each kernel's instruction mix by opcode (sass_mix.py) is
# printed, and a few lines of ncu's details page (grid, duration, occupancy, cycles a warp per issued instruction).
# NCU_COUNT=N: N launches from SKIP on (one table each: e.g. a layer's six k_mv, told apart by their grids);
# NCU_CACHE=none: the caches left as the step left them (default all: flushed before the launch).
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
ncu=$(cuda_tool ncu)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
kernels=("$@")
[ ${#kernels[@]} -eq 0 ] && kernels=(k_route)
for ks in "${kernels[@]}"; do
    k=${ks%%:*} skip=${SKIP:-300}
    [ "$k" != "$ks" ] && skip=${ks#*:}
    rep=$out/src-${k//[^A-Za-z0-9_]/_}-$skip
    sel=(--kernel-name "$k")
    [ "${NCU_DEMANGLED:-0}" = 1 ] && sel=(--kernel-name-base demangled --kernel-name "regex:$k")
    # shellcheck disable=SC2086 # NCU_BENCH is several words
    LILAC_CUDA_GRAPH=0 timeout "${NCU_TIMEOUT:-150}" "$ncu" -f -o "$rep" "${sel[@]}" --launch-skip "$skip" \
        --launch-count "${NCU_COUNT:-1}" --cache-control "${NCU_CACHE:-all}" --warp-sampling-interval 0 \
        --section SourceCounters --section WarpStateStats --section SpeedOfLight \
        --section Occupancy ${NCU_PROG:-"$build/lilac" bench -m "$synth" --backend cuda ${NCU_BENCH:--p 0 -n 16} -r 1} \
        >"$rep.log" 2>&1
    echo "== $k, launch $skip (rc=$?)"
    csv=$rep.csv
    "$ncu" -i "$rep.ncu-rep" --page source --csv --print-source sass >"$csv" 2>&1 ||
        { echo "no source page:"; head -3 "$csv"; }
    "$ncu" -i "$rep.ncu-rep" --page details 2>&1 |
        grep -E "Grid Size|Duration|Registers Per|Achieved Occupancy|Executed Ipc A|Warp Cycles Per Issued" |
        head -$((8 * ${NCU_COUNT:-1}))
    python3 "$(dirname "$0")/sass_mix.py" "$csv" "${MIX_TOP:-14}"
    [ "${NCU_GZIP:-0}" = 1 ] && gzip -f "$csv"
    rm -f "$rep.ncu-rep"
done
