#!/usr/bin/env bash
# Build every fuzz/fuzz_*.c as a libFuzzer target (ASan + UBSan), seed its
# corpus, and run each for SECONDS (default 120). Exits non-zero when any
# target finds a crash, leak or timeout; the inputs go to fuzz/out/.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     e.g. fuzz/run.sh 300 gguf
#
# Installs nothing. Needs clang with libFuzzer (Debian 12: apt-get install
# clang libclang-rt-14-dev) and jansson (apt-get install libjansson-dev pkg-config).
set -u

secs=${1:-120}
shift || true
case $secs in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS] [TARGET...]" >&2
    exit 2
    ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
build=$root/build-fuzz # git-ignored (/build*/)
out=$root/fuzz/out
fixtures=${LILAC_FIXTURES:-$root/../shared/fixtures}

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz/run.sh: clang not found; install it with: apt-get install clang libclang-rt-14-dev" >&2
    exit 2
fi
if ! pkg-config --exists jansson 2>/dev/null; then
    echo "fuzz/run.sh: jansson not found; install it with: apt-get install libjansson-dev pkg-config" >&2
    exit 2
fi
mkdir -p "$build" "$out"
if ! echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' |
    clang -x c - -fsanitize=fuzzer -o "$build/.probe" 2>/dev/null; then
    echo "fuzz/run.sh: clang cannot link libFuzzer; install it with: apt-get install libclang-rt-14-dev" >&2
    exit 2
fi

# Targets: the ones named, else every fuzz/fuzz_*.c.
targets=()
if [ $# -gt 0 ]; then
    for t in "$@"; do targets+=("${t#fuzz_}"); done
else
    for src in fuzz/fuzz_*.c; do
        [ -e "$src" ] || continue
        t=${src#fuzz/fuzz_}
        targets+=("${t%.c}")
    done
fi
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz/run.sh: no fuzz/fuzz_*.c targets" >&2
    exit 2
fi

# The library sources a target links: the parsers and their utilities.
# (chat.c alone of engine/: the rest needs the model; api.c alone of server/: the rest is the HTTP server)
lib_srcs=(src/util/*.c src/format/*.c src/tokenizer/*.c src/engine/chat.c src/server/api.c)
# -D_POSIX_C_SOURCE as CMakeLists.txt sets it for the whole build.
defs=(-D_POSIX_C_SOURCE=200809L)
cflags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
    -std=c11 -Wall -Wextra "${defs[@]}" -Iinclude -Isrc)
# shellcheck disable=SC2207
# (libcrypto: src/format/verify.c's SHA-256)
libs=($(pkg-config --cflags --libs jansson libpcre2-8 libutf8proc libcrypto))

# Seed fuzz/corpus-$1/: fixture files of the same extension (their first
# 64 KiB: enough for headers), then whatever tests/test_$1.c writes when run
# with --write-seeds DIR (valid synthetic images), if it supports that.
seed() {
    local t=$1 corpus=$root/fuzz/corpus-$1 n=0 f
    mkdir -p "$corpus"
    if [ -d "$fixtures" ]; then
        while IFS= read -r -d '' f; do
            head -c 65536 "$f" >"$corpus/fixture-$(echo "$f" | cksum | cut -d' ' -f1).$t"
            n=$((n + 1))
        done < <(find "$fixtures" -name "*.$t" -type f -print0)
    fi
    local test_src=tests/test_$t.c
    if [ -f "$test_src" ] && grep -q -- '--write-seeds' "$test_src"; then
        if clang -std=c11 -g -O1 "${defs[@]}" -Iinclude -Isrc -Itests -DLILAC_SOURCE_DIR="\"$root\"" \
            -DLILAC_BINARY_DIR="\"$build\"" "$test_src" "${lib_srcs[@]}" "${libs[@]}" -lpthread -lm \
            -o "$build/seed_$t" 2>"$build/seed_$t.log" &&
            "$build/seed_$t" --write-seeds "$corpus"; then
            n=$((n + $(ls "$corpus"/seed-* 2>/dev/null | wc -l)))
        else
            echo "  (could not build or run the seed writer in $test_src; see $build/seed_$t.log)"
        fi
    fi
    echo "  seeded $corpus ($n seed files; $(ls "$corpus" | wc -l) inputs in all)"
}

# A few tokens libFuzzer would take long to guess.
dict() {
    case $1 in
    gguf)
        printf '%s\n' '"GGUF"' '"general.alignment"' '"split.count"' '"split.no"' \
            '"split.tensors.count"' '"\x03\x00\x00\x00"' '"\x02\x00\x00\x00"' >"$build/$1.dict"
        echo "-dict=$build/$1.dict"
        ;;
    api)
        printf '%s\n' '"\"messages\""' '"\"role\""' '"\"content\""' '"\"tool_calls\""' '"\"function\""' \
            '"\"arguments\""' '"\"tools\""' '"\"tool_choice\""' '"\"prompt\""' '"\"stop\""' '"\"logprobs\""' \
            '"\"top_logprobs\""' '"\"max_tokens\""' '"\"temperature\""' '"\"reasoning_effort\""' \
            '"\"chat_template_kwargs\""' '"\"enable_thinking\""' '"\"type\""' '"\"text\""' '"\"name\""' \
            '"\"assistant\""' '"\"user\""' '"\"system\""' '"\"tool\""' '"\"developer\""' '"\\ud83d"' \
            '"Bearer "' >"$build/$1.dict"
        echo "-dict=$build/$1.dict"
        ;;
    esac
}

failed=()
for t in "${targets[@]}"; do
    src=fuzz/fuzz_$t.c
    if [ ! -f "$src" ]; then
        echo "fuzz/run.sh: no $src" >&2
        failed+=("$t (no source)")
        continue
    fi
    echo "== $t: building"
    if ! clang "${cflags[@]}" "$src" "${lib_srcs[@]}" "${libs[@]}" -lpthread -lm -o "$build/fuzz_$t"; then
        failed+=("$t (build)")
        continue
    fi
    seed "$t"
    echo "== $t: fuzzing for ${secs}s (log: $out/$t.log)"
    # shellcheck disable=SC2046
    "$build/fuzz_$t" "$root/fuzz/corpus-$t" $(dict "$t") -max_total_time="$secs" -max_len=65536 \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/$t-" \
        >"$out/$t.log" 2>&1
    rc=$?
    tail -n 12 "$out/$t.log" | sed 's/^/  /'
    if [ $rc -ne 0 ]; then
        echo "== $t: FAILED (exit $rc); the input is in $out/ (${t}-crash-*, -leak-*, -timeout-*, -oom-*)"
        failed+=("$t")
    else
        echo "== $t: ok"
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz/run.sh: failures: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz/run.sh: all targets ran ${secs}s without a crash, leak or timeout"
