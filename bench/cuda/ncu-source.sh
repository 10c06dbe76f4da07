#!/usr/bin/env bash
# Where a decode-step kernel's warps spend their time, instruction by instruction: ncu's SourceCounters
# (warp stall samples a SASS instruction) for one launch of each named kernel, exported as CSV to
# OUT/sass-KERNEL.csv, and the instructions with the most samples printed. Needs run.sh build and synth.
#
#   bench/cuda/ncu-source.sh [KERNEL[:SKIP]...]    (env: any LILAC_CUDA_* switches; default k_route)
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
    rep=$out/src-$k-$skip
    LILAC_CUDA_GRAPH=0 timeout "${NCU_TIMEOUT:-150}" "$ncu" -f -o "$rep" --kernel-name "$k" --launch-skip "$skip" \
        --launch-count 1 --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
        "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 16 -r 1 >"$rep.log" 2>&1
    echo "== $k, launch $skip (rc=$?)"
    "$ncu" -i "$rep.ncu-rep" --page source --csv --print-source sass >"$out/sass-$k-$skip.csv" 2>&1 ||
        { echo "no source page:"; head -3 "$out/sass-$k-$skip.csv"; }
    wc -l <"$out/sass-$k-$skip.csv"
    rm -f "$rep.ncu-rep"
done
