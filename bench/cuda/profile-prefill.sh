#!/usr/bin/env bash
# Where a CUDA prefill spends its time, on the GPU machine: every kernel's time
# over one pp512 run from ncu (serialized, caches cold: small kernels look
# dearer than they are; the machine has no nsys), summed by kernel
# (ncu_sum.py), then ncu on a layer's worth of tensor-core product launches
# (k_mma, each named with its template arguments): duration, DRAM and
# tensor-pipe use, occupancy, and the warps' top stall reasons.
# Needs run.sh build and synth first; writes under OUT.
#
#   bench/cuda/profile-prefill.sh [PROMPT_TOKENS]   (env: MMA_SKIP launches of k_mma passed over, default 40;
#                                                    MMA_COUNT profiled, default 8)
set -u
# shellcheck source=bench/cuda/common.sh
. "$(dirname "$0")/common.sh"
n=${1:-512}
ncu=$(cuda_tool ncu)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
LILAC_CUDA_GRAPH=0 timeout "${NCU_TIMEOUT:-200}" "$ncu" --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --launch-count "${ALL_COUNT:-4000}" "$build/lilac" bench -m "$synth" --backend cuda -p "$n" -n 0 -r 1 \
    >"$out/ncu-prefill-all.csv" 2>"$out/ncu-prefill-all.log"
echo "== every kernel of one pp$n run (rc=$?), by kernel:"
python3 "$(dirname "$0")/ncu_sum.py" "$out/ncu-prefill-all.csv" | head -30
f=$out/ncu-prefill-mma.txt
metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warp_latency_per_inst_issued.ratio,smsp__inst_executed.sum,gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,dram__bytes_read.sum
LILAC_CUDA_GRAPH=0 timeout "${NCU_TIMEOUT:-200}" "$ncu" --kernel-name regex:k_mma --launch-skip "${MMA_SKIP:-40}" \
    --launch-count "${MMA_COUNT:-8}" --metrics "$metrics" \
    "$build/lilac" bench -m "$synth" --backend cuda -p "$n" -n 0 -r 1 >"$f" 2>&1
echo "== ncu k_mma (rc=$?): $f"
grep -E "k_mma|^ +(sm__|smsp__|dram__|gpu__|launch__)" "$f" | sed 's/  */ /g; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | cut -c1-200
