#!/usr/bin/env bash
# The NEON kernels (src/kernels/cpu/*_neon.c) under emulation: cross-
# compiles tests/test_qfast.c, test_qr16_q4k.c and test_qr16_q6k.c with the
# scalar and NEON kernels for aarch64 and runs each under
# qemu-aarch64-static, twice:
#   - on qemu's default CPU (it has the dot-product extension): the neon
#     set must be picked and match the scalar oracle (the same checks as on
#     x86: quantizer bit for bit, every dot product, probes, matmul; the
#     16-row kernels against their scalar oracle and independent of nt);
#   - on a Cortex-A53 (ARMv8.0, no sdot): the neon set must be refused and
#     the scalar one picked (the qr16 tests say they skip the neon kernel).
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
neon_objs=()
for f in "$root"/src/kernels/cpu/*_neon.c; do
    o="$out/$(basename "${f%.c}").o"
    "$cc" "${flags[@]}" -Werror -march=armv8.2-a+dotprod -c "$f" -o "$o"
    neon_objs+=("$o")
done
tests=(test_qfast test_qr16_q4k test_qr16_q6k)
for t in "${tests[@]}"; do
    "$cc" "${flags[@]}" -Werror -c "$root/tests/$t.c" -o "$out/$t.o"
    "$cc" -static -pthread -o "$out/$t" "$out/$t.o" "${objs[@]}" "${neon_objs[@]}" -lm
    echo "built $out/$t for aarch64"
done

# What each test must print on a CPU with dotprod (the neon kernels run
# and are checked) and on a Cortex-A53 (they are refused, said so).
want_dp() {
    case "$1" in
    test_qfast) echo "kernel sets run here: scalar neon (best: neon)" ;;
    test_qr16_q4k) echo "qr16 Q4_K kernels run here: scalar neon" ;;
    test_qr16_q6k) echo "qr16 Q6_K kernels tested: scalar neon" ;;
    esac
}
want_a53() {
    case "$1" in
    test_qfast) echo "kernel sets run here: scalar (best: scalar)" ;;
    test_qr16_q4k) echo "SKIP (part): this CPU cannot run the neon qr16 Q4_K kernel (no dotprod)" ;;
    test_qr16_q6k) echo "SKIP (part): this CPU cannot run the neon kernel (no dotprod): not tested" ;;
    esac
}

run=("$qemu")
[ $native = 1 ] && run=()
status=0
for t in "${tests[@]}"; do
    log="$out/$t.dotprod.log"
    if ! "${run[@]}" "$out/$t" >"$log" 2>&1; then
        cat "$log"
        echo "FAIL: $t failed on the emulated CPU with dotprod" >&2
        status=1
    else
        cat "$log"
    fi
    if ! grep -qxF "$(want_dp "$t")" "$log"; then
        echo "FAIL: $t: the emulated CPU with dotprod did not run the neon kernels (no line '$(want_dp "$t")')" >&2
        status=1
    fi
done

if [ $native = 1 ]; then
    echo "native aarch64 host: the Cortex-A53 detection check needs qemu and was not run"
    exit $status
fi
for t in "${tests[@]}"; do
    log="$out/$t.a53.log"
    if ! QEMU_CPU=cortex-a53 "$qemu" "$out/$t" >"$log" 2>&1; then
        cat "$log"
        echo "FAIL: $t failed on an emulated Cortex-A53" >&2
        status=1
    fi
    if ! grep -qxF "$(want_a53 "$t")" "$log" || grep -q " neon" <(grep -E "run here:|tested:" "$log"); then
        cat "$log"
        echo "FAIL: $t: on a Cortex-A53 (no dotprod) the neon kernels were not refused" >&2
        status=1
    else
        echo "Cortex-A53 (no dotprod): $t: neon refused, scalar checked: $(tail -1 "$log")"
    fi
done
[ $status = 0 ] && echo "PASS: tests/neon/run.sh (${tests[*]}, dotprod and Cortex-A53)"
exit $status
