# Sourced by the bench/cuda scripts: the paths they share, each overridable from the environment.
#   root   the source tree
#   out    where the scripts write (OUT, default ./cuda-out; created)
#   build  the CUDA build (BUILD, default ./build-cuda)
#   synth  the 35B-A3B synthetic file (SYNTH; run.sh synth makes it)
# and the libraries carried in .deps (bench/cuda/deps.sh) where the machine lacks them.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The hash of the sources a build reads (carry-pack.sh records it beside its binaries).
source_hash() {
    (cd "$root" && find src include tests CMakeLists.txt -type f -not -path '*/node_modules/*' | LC_ALL=C sort |
        xargs sha256sum | sha256sum | cut -c1-16)
}
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = "--source-hash" ]; then # run, not sourced
    source_hash
    exit 0
fi
# what bench/cuda/carry-pack.sh packed here, unpacked the first time on the GPU machine
if [ -f "$root/.carry/prebuilt.tar.xz" ] && [ ! -x "$root/build-cuda/carry/lilac" ]; then
    mkdir -p "$root/build-cuda/carry" && xz -dc "$root/.carry/prebuilt.tar.xz" | tar -xf - -C "$root/build-cuda/carry"
    [ "$(cat "$root/.carry/source.sha" 2>/dev/null)" = "$(source_hash)" ] ||
        echo "WARNING: .carry/prebuilt.tar.xz was built from other sources than this tree's (rerun carry-pack.sh)"
fi
# (.devfix, or the folder CARRY_FIX named: a mark says it is done)
if [ -f "$root/.carry/devfix.tar.xz" ] && [ ! -f "$root/.carry/devfix.unpacked" ]; then
    xz -dc "$root/.carry/devfix.tar.xz" | tar -xf - -C "$root" && touch "$root/.carry/devfix.unpacked"
fi
out=${OUT:-$root/cuda-out}
build=${BUILD:-$root/build-cuda}
synth=${SYNTH:-/tmp/qwen3.6-35b-a3b-Q4_K_M.gguf}
mkdir -p "$out"
# libraries carried in .deps (bench/cuda/deps.sh) where the machine lacks them
if [ -d "$root/.deps/usr" ] && ! pkg-config --exists jansson libpcre2-8 libutf8proc 2>/dev/null; then
    d=$root/.deps/usr
    sed -i "s|^prefix=.*|prefix=$d|" "$d"/lib/x86_64-linux-gnu/pkgconfig/*.pc
    export PKG_CONFIG_PATH=$d/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$d/lib/x86_64-linux-gnu
fi

# a prebuilt tree (bench/cuda/prebuilt.sh) brings the libraries its binaries load
if [ -d "$build/lib" ]; then
    export LD_LIBRARY_PATH=$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# A CUDA tool's path (ncu, nsys, compute-sanitizer): on PATH, else under /usr/local/cuda*/bin or the other
# places given (globs); empty where the machine has none.
cuda_tool() { # NAME [GLOB...]
    local name=$1
    shift
    command -v "$name" || ls /usr/local/cuda*/bin/"$name" "$@" 2>/dev/null | head -1
}
