#!/usr/bin/env bash
# One kernel launch of a CUDA test binary under ncu (SourceCounters, warp states, speed of light): its SASS with
# the warp instructions executed and stall samples each, as OUT/ncu-NAME.csv.gz, its instruction mix printed
# (sass_mix.py), and ncu's details page as OUT/ncu-NAME.txt. Needs run.sh build. The test's environment passes
# through (e.g. LILAC_CUDA_BENCH_ONLY=1 for test_cuda_mma's decode-product bench alone).
#
#   bench/cuda/ncu-test.sh TEST KERNEL_REGEX [SKIP]     (KERNEL_REGEX over demangled names)
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
ncu=$(cuda_tool ncu)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
t=${1:?test} k=${2:?kernel regex} skip=${3:-0}
name=${t}-${k//[^A-Za-z0-9_]/_}-$skip
rep=$out/ncu-$name
timeout "${NCU_TIMEOUT:-150}" "$ncu" -f -o "$rep" --kernel-name-base demangled --kernel-name "regex:$k" \
    --launch-skip "$skip" --launch-count 1 --warp-sampling-interval 0 --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --section Occupancy --section LaunchStats \
    "$build/tests/$t" >"$rep.log" 2>&1
echo "== $t: $k, launch $skip (rc=$?)"
"$ncu" -i "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.csv" 2>&1 ||
    { echo "no source page:"; head -3 "$rep.csv"; }
"$ncu" -i "$rep.ncu-rep" --page details >"$rep.txt" 2>&1
grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|No Eligible" \
    "$rep.txt" | head -12
python3 "$(dirname "$0")/sass_mix.py" "$rep.csv" "${MIX_TOP:-14}"
gzip -f "$rep.csv"
rm -f "$rep.ncu-rep"
