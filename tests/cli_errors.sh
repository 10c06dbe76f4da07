#!/usr/bin/env bash
# cli_errors: the lilac command line on broken models and bad arguments.
# Each broken input (made here from the fixture models with head/dd/printf/
# sed) is given to `lilac info X` and `lilac logits -m X --tokens 1,2`: the
# exit status must be 1 (not 0, not a signal), stdout empty, and stderr
# exactly one line "lilac: error: ..." naming the file.
#
#   bash tests/cli_errors.sh LILAC_BINARY SOURCE_DIR
set -u

LILAC=${1:?usage: cli_errors.sh LILAC_BINARY SOURCE_DIR}
SRC=${2:?usage: cli_errors.sh LILAC_BINARY SOURCE_DIR}
if [ ! -x "$LILAC" ]; then
    echo "cli_errors: $LILAC is not an executable" >&2
    exit 1
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/lilac-cli-errors-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

pass=0
fail=0

# check LABEL WANT_RC NAME MODE -- COMMAND...
#   WANT_RC: the exit status wanted; NAME: text the error line must hold;
#   MODE: "one" (stderr is exactly the error line) or "usage" (the error
#   line first, then the usage text, which holds no other error line).
check() {
    local label=$1 want=$2 name=$3 mode=$4
    shift 5
    "$@" >"$T/stdout" 2>"$T/stderr.all"
    local rc=$?
    # where the model runs (a CUDA build says so on every load) is a note, not part of the error
    grep -v '^lilac: note: running on ' "$T/stderr.all" >"$T/stderr"
    local why=""
    local first
    first=$(head -n 1 "$T/stderr")
    local n_lines n_nl n_err
    n_lines=$(awk 'END { print NR }' "$T/stderr")
    n_nl=$(wc -l <"$T/stderr")
    n_err=$(grep -c '^lilac: error: ' "$T/stderr")
    if [ "$rc" -ge 128 ]; then
        why+="killed by signal $((rc - 128)); "
    elif [ "$rc" -ne "$want" ]; then
        why+="exit status $rc, expected $want; "
    fi
    case "$first" in
        "lilac: error: "*) ;;
        *) why+="stderr does not start with 'lilac: error: '; " ;;
    esac
    if [ "$mode" = one ]; then
        if [ "$n_lines" -ne 1 ] || [ "$n_nl" -ne 1 ]; then
            why+="stderr has $n_lines lines, expected exactly 1; "
        fi
    elif [ "$n_err" -ne 1 ]; then
        why+="stderr has $n_err error lines, expected 1; "
    fi
    case "$first" in
        *"$name"*) ;;
        *) why+="the error line does not name '$name'; " ;;
    esac
    if [ -s "$T/stdout" ]; then
        why+="output on stdout; "
    fi
    if [ -z "$why" ]; then
        pass=$((pass + 1))
        echo "ok   $label: $first"
    else
        fail=$((fail + 1))
        echo "FAIL $label: $why"
        echo "     command: $*"
        sed 's/^/     stderr: /' "$T/stderr" | head -n 20
    fi
}

# Both commands on one broken model path.
check_model() {
    local label=$1 path=$2 name=${3:-$2}
    check "info $label" 1 "$name" one -- "$LILAC" info "$path"
    check "logits $label" 1 "$name" one -- "$LILAC" logits -m "$path" --tokens 1,2
}

# ---- bad command lines (no model needed) ----
check "unknown command" 2 "unknown command 'frobnicate'" usage -- "$LILAC" frobnicate
check "logits without a model" 1 "no model given" one -- "$LILAC" logits
check "logits without a model, with tokens" 1 "no model given" one -- "$LILAC" logits --tokens 1,2
check "info without a model" 1 "no MODEL given" one -- "$LILAC" info
check "info two models" 1 "unexpected argument 'b.gguf'" one -- "$LILAC" info a.gguf b.gguf
check "info unknown option" 1 "unknown option '--bogus'" one -- "$LILAC" info a.gguf --bogus
check "info --ctx 0" 1 "--ctx" one -- "$LILAC" info a.gguf --ctx 0
check "logits unknown option" 1 "'--bogus'" one -- "$LILAC" logits -m a.gguf --tokens 1 --bogus
check "logits -m without a value" 1 "'-m'" one -- "$LILAC" logits --tokens 1,2 -m
check "logits --tokens 1,x" 1 "'1,x'" one -- "$LILAC" logits -m a.gguf --tokens 1,x
check "logits --tokens empty" 1 "--tokens" one -- "$LILAC" logits -m a.gguf --tokens ""
check "logits --tokens -5" 1 "'-5'" one -- "$LILAC" logits -m a.gguf --tokens -5
check "logits --tokens 1,,2" 1 "'1,,2'" one -- "$LILAC" logits -m a.gguf --tokens 1,,2
check "logits --threads 0" 1 "--threads" one -- "$LILAC" logits -m a.gguf --tokens 1,2 --threads 0
check "logits --threads x" 1 "'x'" one -- "$LILAC" logits -m a.gguf --tokens 1,2 --threads x
check "logits no tokens" 1 "no tokens given" one -- "$LILAC" logits -m a.gguf
check "--kv-type f64" 1 "--kv-type takes f32 or f16, not 'f64'" one -- "$LILAC" run -m a.gguf --kv-type f64
check "--kv-type without a value" 1 "--kv-type takes f32 or f16" one -- "$LILAC" run -m a.gguf --kv-type
check "--backend gpu" 1 "--backend takes cpu, cuda or auto, not 'gpu'" one -- "$LILAC" run -m a.gguf --backend gpu
check "bench -d 0,,1" 1 "'0,,1'" one -- "$LILAC" bench -m a.gguf -d 0,,1
check "bench -d x" 1 "'x'" one -- "$LILAC" bench -m a.gguf -d x
check "bench --check-greedy 0" 1 "--check-greedy wants a token count, not '0'" one -- "$LILAC" bench -m a.gguf --check-greedy 0

# ---- paths that are no model (no fixture needed) ----
check_model "path that does not exist" "$T/does-not-exist.gguf"
mkdir "$T/not-a-checkpoint"
echo hello >"$T/not-a-checkpoint/notes.txt"
check_model "directory that is no checkpoint" "$T/not-a-checkpoint"
: >"$T/empty.gguf"
check_model "empty file" "$T/empty.gguf"
printf 'GGUF\003\000' >"$T/ten.gguf"
printf '\000\000\000\000' >>"$T/ten.gguf"
check_model "10-byte file" "$T/ten.gguf"

# ---- broken copies of the fixture models ----
if [ -n "${LILAC_FIXTURES:-}" ]; then
    FX=$LILAC_FIXTURES
else
    FX=$SRC/../shared/fixtures
fi
M=$FX/tiny-qwen35moe
if [ ! -f "$M/gguf/model-bf16.gguf" ] || [ ! -f "$M/hf/config.json" ]; then
    echo "$pass passed, $fail failed"
    if [ "$fail" -ne 0 ]; then
        exit 1
    fi
    echo "SKIP: fixtures not found at $FX (set LILAC_FIXTURES or place them at $SRC/../shared/fixtures); only the command-line checks ran"
    exit 77
fi
G=$M/gguf/model-bf16.gguf

# the last command's error line holds TEXT
expect_in_stderr() {
    if grep -qF -- "$1" "$T/stderr"; then
        pass=$((pass + 1))
        echo "ok   the message says: $1"
    else
        fail=$((fail + 1))
        echo "FAIL the message does not say: $1"
    fi
}

# byte offset of the first occurrence of a string in a file
offset_of() {
    LC_ALL=C grep -obaF -- "$2" "$1" | head -n 1 | cut -d: -f1
}
# overwrite bytes at an offset, in place
poke() {
    printf '%s' "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

head -c 30000 "$G" >"$T/truncated.gguf"
check_model "GGUF truncated in its metadata" "$T/truncated.gguf"

size=$(wc -c <"$G")
head -c $((size - 1000)) "$G" >"$T/short-data.gguf"
check_model "GGUF truncated in its data" "$T/short-data.gguf"

cp "$G" "$T/magic.gguf" && chmod u+w "$T/magic.gguf"
poke "$T/magic.gguf" 0 GGML
check_model "GGUF with a wrong magic" "$T/magic.gguf"

cp "$G" "$T/renamed.gguf" && chmod u+w "$T/renamed.gguf"
off=$(offset_of "$T/renamed.gguf" blk.0.attn_norm.weight)
poke "$T/renamed.gguf" $((off + 21)) X
check_model "GGUF missing a tensor" "$T/renamed.gguf"
expect_in_stderr "missing tensor 'blk.0.attn_norm.weight'"

cp "$G" "$T/arch.gguf" && chmod u+w "$T/arch.gguf"
off=$(offset_of "$T/arch.gguf" qwen35moe)
poke "$T/arch.gguf" "$off" qwen99moe
check_model "GGUF of an unsupported architecture" "$T/arch.gguf"
expect_in_stderr "unsupported architecture 'qwen99moe'"

hf_copy() { # DIR: a checkpoint of symlinks to the fixture's files
    mkdir "$1"
    local f
    for f in config.json model.safetensors.index.json model-00001-of-00002.safetensors \
        model-00002-of-00002.safetensors; do
        ln -s "$M/hf/$f" "$1/$f"
    done
}

hf_copy "$T/hf-truncated"
rm "$T/hf-truncated/config.json"
head -c 400 "$M/hf/config.json" >"$T/hf-truncated/config.json"
check_model "config.json truncated" "$T/hf-truncated" "$T/hf-truncated/config.json"

hf_copy "$T/hf-llama"
rm "$T/hf-llama/config.json"
sed 's/"model_type": "[^"]*"/"model_type": "llama"/' "$M/hf/config.json" >"$T/hf-llama/config.json"
check_model "config.json of model_type llama" "$T/hf-llama" "$T/hf-llama/config.json"

hf_copy "$T/hf-no-hidden"
rm "$T/hf-no-hidden/config.json"
sed '/"hidden_size"/d' "$M/hf/config.json" >"$T/hf-no-hidden/config.json"
check_model "config.json without hidden_size" "$T/hf-no-hidden" "$T/hf-no-hidden/config.json"

hf_copy "$T/hf-moe-ff"
rm "$T/hf-moe-ff/config.json"
sed 's/"moe_intermediate_size": 256/"moe_intermediate_size": 128/' "$M/hf/config.json" >"$T/hf-moe-ff/config.json"
check_model "config.json with a wrong expert width" "$T/hf-moe-ff"

hf_copy "$T/hf-no-shard"
rm "$T/hf-no-shard/model-00002-of-00002.safetensors"
check_model "checkpoint missing a shard" "$T/hf-no-shard" "$T/hf-no-shard/model-00002-of-00002.safetensors"

hf_copy "$T/hf-short-shard"
rm "$T/hf-short-shard/model-00001-of-00002.safetensors"
head -c 5000000 "$M/hf/model-00001-of-00002.safetensors" >"$T/hf-short-shard/model-00001-of-00002.safetensors"
check_model "checkpoint with a truncated shard" "$T/hf-short-shard" \
    "$T/hf-short-shard/model-00001-of-00002.safetensors"

# ---- errors after the model loaded ----
check "logits token outside the vocabulary" 1 "outside the vocabulary" one -- \
    "$LILAC" logits -m "$G" --tokens 1,99999
check "logits to an unwritable file" 1 "$T/no-such-dir/out.f32" one -- \
    "$LILAC" logits -m "$G" --tokens 1,2 -o "$T/no-such-dir/out.f32"

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    exit 1
fi
exit 0
