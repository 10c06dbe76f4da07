#!/usr/bin/env bash
# Binaries built here (this machine's nvcc, sm_90a) for the GPU machine, so that a measuring call there skips its
# build (~95 s of device time a call): lilac and the CUDA tests named, stripped, beside the shared libraries they
# load beyond glibc and libstdc++ (the GPU machine lacks some; libcudart travels too), into DEST (default
# build-cuda/carry, git-ignored). Carry DEST: with the tree it must stay under the device tool's 64 MiB (lilac
# and one CUDA test fit; each is ~19 MB).
#
#   cmake --build build-cuda -j && [DEST=...] bench/cuda/prebuilt.sh [TEST...]  (here)
#   BUILD=$PWD/build-cuda/carry bash bench/cuda/run.sh synth tg bits         (there: no build step)
#
# (Session 33: ran there as is, lilac and test_cuda_attn from build-cuda/carry, the call 172 s with no build.
# The binaries need the GPU machine's glibc to be 2.34 or later and its driver to take CUDA 13. Tests that read
# fixtures do not fit beside them: .devfix is 45 MB.)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${BUILD:-$root/build-cuda}
dest=${DEST:-$root/build-cuda/carry}
[ -x "$src/lilac" ] || { echo "no $src/lilac: build it first (cmake --build build-cuda)" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest/lib" "$dest/tests"
cp "$src/lilac" "$dest/"
for t in "$@"; do
    [ -x "$src/tests/$t" ] || { echo "no $src/tests/$t" >&2; exit 1; }
    cp "$src/tests/$t" "$dest/tests/"
done
strip "$dest/lilac" "$dest"/tests/* 2>/dev/null || true
# the libraries the loader finds for them here, less the C and C++ runtimes every machine has
for b in "$dest/lilac" "$dest"/tests/*; do
    [ -f "$b" ] || continue
    ldd "$b" | awk '/=>/ {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+)\.so' | while read -r l; do
    cp -L "$l" "$dest/lib/"
done
tree=$(git -C "$root" ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
size=$(du -sb "$dest" | cut -f1)
echo "$dest: $((size / 1048576)) MiB, with the tree $(((size + tree) / 1048576)) MiB of the 64 the device tool carries"
# (carry-pack.sh compresses DEST: its own check)
[ -n "${PREBUILT_NOCHECK:-}" ] || [ $((size + tree)) -le $((64 * 1048576)) ] ||
    { echo "too large: name fewer tests (or bench/cuda/carry-pack.sh: compressed)" >&2; exit 1; }
