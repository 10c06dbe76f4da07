#!/usr/bin/env bash
# Set up, build and run the whole test suite: the library and the tests
# under AddressSanitizer + UndefinedBehaviorSanitizer with warnings as
# errors, plus an optimized build (whose warnings differ) that must also
# compile cleanly, and a short fuzzing run of the file parsers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DLILAC_WERROR=ON -DBUILD_TESTING=OFF >/dev/null
cmake --build build-release -j"$jobs"

cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DLILAC_SANITIZE=ON -DLILAC_WERROR=ON >/dev/null
cmake --build build-test -j"$jobs"
cd build-test
ctest -j"$jobs" --output-on-failure --timeout 1200
