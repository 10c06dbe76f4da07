#!/usr/bin/env bash
# Build bench/*.c (or the ones named) against the lilac_core library of a
# CMake build directory:
#
#   bench/build.sh BUILD_DIR [NAME...]     e.g. bench/build.sh build tokenizer_bench
#
# The programs go to BUILD_DIR/bench/. Build BUILD_DIR first (a Release
# build for numbers worth quoting); when it was configured with
# -DLILAC_SANITIZE=ON the benchmarks are built with the sanitizers too.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 BUILD_DIR [NAME...]" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
shift
lib=$build/liblilac_core.a
if [ ! -f "$lib" ]; then
    echo "$0: $lib not found; build the library first (cmake --build $build)" >&2
    exit 2
fi
flags=(-O2 -g -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra)
if grep -q '^LILAC_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    flags+=(-fsanitize=address,undefined -fno-omit-frame-pointer)
fi
if grep -q 'LILAC_X86=1' "$build/CMakeFiles/lilac_core.dir/flags.make" 2>/dev/null; then
    flags+=(-DLILAC_X86=1)
fi
# shellcheck disable=SC2207
libs=($(pkg-config --cflags --libs jansson libpcre2-8 libutf8proc))
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for src in "$root"/bench/*.c; do
        n=${src##*/}
        names+=("${n%.c}")
    done
fi
mkdir -p "$build/bench"
for n in "${names[@]}"; do
    echo "bench/build.sh: $build/bench/$n"
    ${CC:-cc} "${flags[@]}" -I"$root/include" -I"$root/src" -DLILAC_SOURCE_DIR="\"$root\"" \
        "$root/bench/$n.c" "$lib" "${libs[@]}" -lpthread -lm -o "$build/bench/$n"
done
