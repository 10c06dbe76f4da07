#!/usr/bin/env bash
# Set up, build and run the whole test suite: the library and the tests
# under AddressSanitizer + UndefinedBehaviorSanitizer with warnings as
# errors, plus an optimized build (whose warnings differ) that must also
# compile cleanly (and, where nvcc is found, one without the CUDA kernels),
# and a short fuzzing run of the file parsers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DLILAC_WERROR=ON -DBUILD_TESTING=OFF >/dev/null
cmake --build build-release -j"$jobs"

cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DLILAC_SANITIZE=ON -DLILAC_WERROR=ON >/dev/null
cmake --build build-test -j"$jobs"

# Where nvcc was found both builds above have the CUDA kernels; a fresh machine has none, so the library and
# every test program must also build without them (cuda_none.c and the tests' non-CUDA paths).
if grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' build-test/CMakeCache.txt; then
    cmake -S . -B build-nocuda -DCMAKE_BUILD_TYPE=Release -DLILAC_CUDA=OFF -DLILAC_WERROR=ON >/dev/null
    cmake --build build-nocuda -j"$jobs"
fi
cd build-test
ctest -j"$jobs" --output-on-failure --timeout 1200
