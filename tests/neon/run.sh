#!/usr/bin/env bash
# The NEON kernels (src/kernels/cpu/qfast_neon.c) under emulation: cross-
# compiles tests/test_qfast.c with the scalar and NEON kernels for aarch64
# and runs it under qemu-aarch64-static, twice:
#   - on qemu's default CPU (it has the dot-product extension): the neon
#     set must be picked and match the scalar oracle (the same checks as on
#     x86: quantizer bit for bit, every dot product, probes, matmul);
#   - on a Cortex-A53 (ARMv8.0, no sdot): the neon set must be refused and
#     the scalar one picked.
#
#   tests/neon/run.sh [OUT_DIR]
#
# Needs the Debian packages gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and
# qemu-user-static (scripts/setup.sh installs them). When they are missing
# it fails, saying so: it never skips silently.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
cc=${AARCH64_CC:-aarch64-linux-gnu-gcc}
qemu=${QEMU_AARCH64:-qemu-aarch64-static}
native=0
[ "$(uname -m)" = aarch64 ] && native=1 # runs directly; no Cortex-A53 to emulate

missing=()
command -v "$cc" >/dev/null 2>&1 || missing+=("$cc (package gcc-aarch64-linux-gnu, with libc6-dev-arm64-cross)")
[ $native = 1 ] || command -v "$qemu" >/dev/null 2>&1 || missing+=("$qemu (package qemu-user-static)")
if [ ${#missing[@]} -gt 0 ]; then
    echo "FAIL: the NEON kernel test cannot run: missing ${missing[*]}." >&2
    echo "      Run scripts/setup.sh (or apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static)." >&2
    exit 1
fi

flags=(-std=c11 -D_POSIX_C_SOURCE=200809L -O2 -g -Wall -Wextra -pthread
       -I"$root/include" -I"$root/src" -I"$root/tests" -DLILAC_SOURCE_DIR="\"$root\"")
# The kernels as CMakeLists.txt builds them for aarch64: every
# src/kernels/cpu/*.c but the x86 ones (and *_neon.c, below), with what
# they use from util/ and format/. The fast path's own files must build
# warning-free for aarch64 too.
mine=" cpu.c qfast_scalar.c "
srcs=()
for f in "$root"/src/kernels/cpu/*.c; do
    case "$f" in *_avx2.c | *_avx512.c | *_neon.c) continue ;; esac
    srcs+=("${f#"$root"/}")
done
srcs+=(src/util/pool.c src/util/err.c src/format/dtype.c)
objs=()
for s in "${srcs[@]}"; do
    extra=()
    case "$mine" in *" $(basename "$s") "*) extra=(-Werror) ;; esac
    o="$out/$(basename "${s%.c}").o"
    "$cc" "${flags[@]}" "${extra[@]}" -c "$root/$s" -o "$o"
    objs+=("$o")
done
# as CMakeLists.txt builds *_neon.c on aarch64
"$cc" "${flags[@]}" -Werror -march=armv8.2-a+dotprod -c "$root/src/kernels/cpu/qfast_neon.c" -o "$out/qfast_neon.o"
"$cc" "${flags[@]}" -Werror -c "$root/tests/test_qfast.c" -o "$out/test_qfast.o"
"$cc" -static -pthread -o "$out/test_qfast" "$out/test_qfast.o" "${objs[@]}" "$out/qfast_neon.o" -lm
echo "built $out/test_qfast for aarch64"

run=("$qemu")
[ $native = 1 ] && run=()
status=0
log="$out/dotprod.log"
if ! "${run[@]}" "$out/test_qfast" >"$log" 2>&1; then
    cat "$log"
    echo "FAIL: test_qfast failed on the emulated CPU with dotprod" >&2
    status=1
else
    cat "$log"
fi
if ! grep -q "kernel sets run here: scalar neon (best: neon)" "$log"; then
    echo "FAIL: the emulated CPU with dotprod did not run (or pick) the neon set" >&2
    status=1
fi

if [ $native = 1 ]; then
    echo "native aarch64 host: the Cortex-A53 detection check needs qemu and was not run"
    exit $status
fi
log="$out/a53.log"
if ! QEMU_CPU=cortex-a53 "$qemu" "$out/test_qfast" >"$log" 2>&1; then
    cat "$log"
    echo "FAIL: test_qfast failed on an emulated Cortex-A53" >&2
    status=1
fi
if ! grep -q "kernel sets run here: scalar (best: scalar)" "$log"; then
    cat "$log"
    echo "FAIL: on a Cortex-A53 (no dotprod) the neon set was not refused" >&2
    status=1
else
    echo "Cortex-A53 (no dotprod): neon refused, scalar picked: $(tail -1 "$log")"
fi
exit $status
