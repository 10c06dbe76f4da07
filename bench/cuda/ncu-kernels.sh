#!/usr/bin/env bash
# Why a decode-step kernel takes what it takes: ncu on one launch each of the
# named kernels (default: the single-block steps on the step's chain), with
# its cycles, clock, and where its warps stall (cycles between two issues a warp spends stalled for each reason:
# "No Instruction" is the instruction cache, "Long Scoreboard" memory,
# "Barrier" __syncthreads, "Short Scoreboard" shared memory and MUFU).
# The graph is off (one kernel a launch); launch-skip past the warm-up.
# Needs run.sh build and synth first; writes OUT/ncu-KERNEL.txt.
#
#   bench/cuda/ncu-kernels.sh [KERNEL[:SKIP]...]   (SKIP: launches of it passed over, default $SKIP or 300;
#                                                    env: any LILAC_CUDA_* switches)
# e.g. k_mv:1200 for a product some steps in (k_mv runs ~10 shapes a layer: vary SKIP by one to walk them).
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
ncu=$(cuda_tool ncu)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
kernels=("$@")
[ ${#kernels[@]} -eq 0 ] && kernels=(k_route k_moe_sum_norm_grid k_norm_router k_conv_step k_dn_fused k_mv:1200 k_mv:1201)
# the share of the warps' cycles each stall reason takes
stalls=no_instruction,long_scoreboard,short_scoreboard,barrier,membar,wait,math_pipe_throttle,lg_throttle,branch_resolving,dispatch_stall,drain,sleeping,selected,not_selected,mio_throttle,imc_miss
metrics=$(echo "$stalls" | tr ',' '\n' | sed 's/.*/smsp__average_warps_issue_stalled_&_per_issue_active.ratio/' | paste -sd,)
for ks in "${kernels[@]}"; do
    k=${ks%%:*} skip=${SKIP:-300}
    [ "$k" != "$ks" ] && skip=${ks#*:}
    f=$out/ncu-$k-$skip.txt
    LILAC_CUDA_GRAPH=0 timeout "${NCU_TIMEOUT:-150}" "$ncu" --kernel-name "$k" --launch-skip "$skip" \
        --launch-count 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
        --section InstructionStats --metrics "$metrics" "$build/lilac" bench -m "$synth" --backend cuda -p 0 -n 16 -r 1 >"$f" 2>&1
    echo "== $k, launch $skip (rc=$?)"
    grep -E "SM Frequency|Elapsed Cycles|Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Block Size|Grid Size" "$f" |
        sed 's/  */ /g' | head -14
    # the stall reasons, largest first
    grep -E "smsp__average_warps_issue_stalled_" "$f" | sed 's/  */ /g; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
        sort -k3 -g -r | head -6
done
