#!/usr/bin/env bash
# The GPU machine's binaries and fixtures compressed into .carry/ (git-ignored), so that one carry holds what a
# measuring call needs without building there (~95 s of device time a call): .carry/prebuilt.tar.xz (lilac and
# the CUDA tests, built here by bench/cuda/prebuilt.sh; the tests share most of their code, so xz with a dictionary
# larger than all of them packs 12 binaries of ~19 MB into ~16 MB) and .carry/devfix.tar.xz (.devfix, ~35 MB).
# bench/cuda/common.sh unpacks them there (into build-cuda/carry and .devfix) the first time a script runs.
#
#   bench/cuda/carry-pack.sh [TEST...]      (here, after cmake -B build-cuda -DLILAC_CUDA=ON; default: every CUDA test)
#   run(..., carry=[".carry"]): BUILD=$PWD/build-cuda/carry LILAC_FIXTURES=$PWD/.devfix bash bench/cuda/run.sh test synth tg
# CARRY_BINS="NAME=BUILDDIR ...": lilac of other builds beside it as NAME (run.sh's switch word LILAC_BIN=NAME runs
# it), e.g. CARRY_BINS=lilac-ef=build-cuda-ef for a build configured with -DCMAKE_CUDA_FLAGS=-DLILAC_CUDA_L2_EF=1
# (brought up to date here, its lilac target). CARRY_NO_FIXTURES=1: no .devfix (room for more binaries);
# CARRY_FIX=DIR: that fixture folder instead (e.g. .devfix-golden-35 with the tests test_golden test_quant_models,
# for run.sh suite; unpacked there under its own name).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${BUILD:-$root/build-cuda}
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
    for t in "$src"/tests/test_cuda_*; do
        [ -x "$t" ] && tests+=("$(basename "$t")")
    done
fi
# the binaries of these sources: the build brought up to date first
cmake --build "$src" -j"$(nproc)" >/dev/null || { echo "the build in $src failed" >&2; exit 1; }
mkdir -p "$root/.carry"
# the sources the binaries were built from (common.sh compares them there: a stale pack says so)
(cd "$root" && bash bench/cuda/common.sh --source-hash) >"$root/.carry/source.sha"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DEST=$tmp/carry PREBUILT_NOCHECK=1 bash "$root/bench/cuda/prebuilt.sh" "${tests[@]}" >/dev/null
for nb in ${CARRY_BINS:-}; do
    name=${nb%%=*} dir=${nb#*=}
    [[ $dir = /* ]] || dir=$root/$dir
    cmake --build "$dir" -j"$(nproc)" --target lilac >/dev/null || { echo "the build in $dir failed" >&2; exit 1; }
    cp "$dir/lilac" "$tmp/carry/$name" && strip "$tmp/carry/$name"
done
tar -cf - -C "$tmp/carry" . | xz -T1 --lzma2=preset=6,dict=192MiB >"$root/.carry/prebuilt.tar.xz"
rm -f "$root/.carry/devfix.tar.xz" "$root/.carry/devfix.unpacked"
fix=${CARRY_FIX:-.devfix}
if [ -z "${CARRY_NO_FIXTURES:-}" ]; then
    [ -d "$root/$fix" ] || [ "$fix" != .devfix ] || bash "$root/bench/cuda/pack-fixtures.sh" >/dev/null
    [ -d "$root/$fix" ] || { echo "no $fix (bench/cuda/pack-fixtures.sh --suite PACK makes .devfix-PACK)" >&2; exit 1; }
    tar -cf - -C "$root" "$fix" | xz -T0 -6 >"$root/.carry/devfix.tar.xz"
fi
tree=$(git -C "$root" ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
size=$(du -cb "$root/.carry"/*.tar.xz | tail -1 | cut -f1)
echo ".carry: ${#tests[@]} tests, lilac ${CARRY_BINS:+and $CARRY_BINS }and ${CARRY_NO_FIXTURES:+no }$fix: $((size / 1048576)) MiB, with the tree $(((size + tree) / 1048576)) MiB of the 64 the device tool carries"
[ $((size + tree)) -le $((64 * 1048576)) ] || { echo "too large: name fewer tests" >&2; exit 1; }
