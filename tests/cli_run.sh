#!/usr/bin/env bash
# lilac run from the command line: greedy decoding reproduces the
# fixture's continuation, text prompts stream well-formed UTF-8, a seed
# reproduces a run, a prompt longer than the context is refused with the
# numbers.  Usage: cli_run.sh LILAC SOURCE_DIR
set -u
lilac=$1
src=$2
fx=${LILAC_FIXTURES:-$src/../shared/fixtures}
[ -d "$fx" ] || { echo "SKIP: fixtures not found at $fx"; exit 77; }
model=$fx/tiny-qwen35moe/gguf/model-bf16.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { # NAME CONDITION...
    local name=$1
    shift
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name"; fi
}
meta=$fx/tiny-qwen35moe/golden/meta.json
prompt=$(python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['greedy']['prompt'])))" "$meta")
cont=$(python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['greedy']['continuation'])))" "$meta")
n=$(echo "$cont" | tr ',' '\n' | wc -l)

"$lilac" run -m "$model" --raw --tokens "$prompt" --temp 0 -n "$n" -o "$tmp/out.txt" >"$tmp/stdout" 2>"$tmp/stderr"
check "greedy run exits 0" test $? -eq 0
"$lilac" tokenize -m "$model" --decode "$cont" >"$tmp/want.txt"
check "greedy run writes the reference continuation" cmp -s "$tmp/out.txt" "$tmp/want.txt"
check "stdout streams the same text" bash -c "head -c $(stat -c %s "$tmp/want.txt") '$tmp/stdout' | cmp -s - '$tmp/want.txt'"
check "speeds reported on stderr" grep -q "tok/s" "$tmp/stderr"

# batched decode: each sequence's greedy tokens equal its tokens alone (bench --check-greedy)
"$lilac" bench -m "$fx/tiny-qwen35moe/gguf/model-Q4_K_M.gguf" -p 0 -n 2 -P 5 -r 1 --check-greedy 8 --json >"$tmp/g" 2>&1
check "bench --check-greedy exits 0" test $? -eq 0
check "bench --check-greedy: 0 of 5 sequences differ" grep -q '"test": "greedy_x5", "parallel": 5, "tokens": 8, "sequences_differing": 0' "$tmp/g"
# the logits batch against alone after the prompt and the first token: 0 on the CPU (bit for bit), float32
# rounding apart on the GPU
check "bench --check-greedy: logits batch vs alone within 1e-4" awk -F'"logits_rel_diff_(prompt|step1)": ' \
    '/greedy_x5/ { n = split($0, _, "logits_rel_diff_"); if (n != 3) exit 1; if ($2 + 0 > 1e-4 || $3 + 0 > 1e-4) exit 1; ok = 1 } END { exit !ok }' "$tmp/g"

for seed in 5 5 6; do
    "$lilac" run -m "$model" -p "Tell me about ünïcödé, 日本語 and emoji 🦙" -n 40 --seed $seed --temp 1.2 \
        -o "$tmp/s$seed.$$.$RANDOM" >/dev/null 2>&1
done
files=("$tmp"/s5.*)
check "a seeded text run makes two outputs" test ${#files[@]} -eq 2
check "the same seed gives the same text" cmp -s "${files[0]}" "${files[1]}"
check "another seed gives other text" bash -c "! cmp -s '${files[0]}' '$tmp'/s6.*"
for f in "$tmp"/s*.*; do
    check "output is well-formed UTF-8 ($f)" python3 -c "open('$f','rb').read().decode('utf-8')"
done

"$lilac" run -m "$model" -p "$(printf 'word %.0s' $(seq 1 50))" --ctx 16 >"$tmp/o" 2>"$tmp/e"
rc=$?
check "an over-long prompt fails with status 1" test $rc -eq 1
check "the refusal names the numbers" grep -q "tokens but the context holds 16" "$tmp/e"
check "the refusal is one line" test "$(grep -vc '^lilac: note: running on ' "$tmp/e")" -eq 1

# a plan that does not fit is refused before the weights are touched
LILAC_MEM_LIMIT=100M "$lilac" run -m "$model" -p "hi" --ctx 100000 >"$tmp/o" 2>"$tmp/e"
check "a plan over the memory limit fails with status 1" test $? -eq 1
check "the refusal gives the numbers and the fix" grep -q "GiB is available.*context of [0-9]* or less" "$tmp/e"
LILAC_MEM_LIMIT=100M "$lilac" plan -m "$model" --ctx 100000 >"$tmp/o" 2>&1
check "plan says it does not fit" grep -q "does NOT fit" "$tmp/o"

# the GPU plan: device memory, part by part, against the GPU's (the model opened on the CPU: nothing uploaded)
"$lilac" plan -m "$model" --ctx 2048 --parallel 2 --backend cuda >"$tmp/o" 2>&1
rc=$?
check "plan --backend cuda prints the GPU plan" grep -q "^GPU memory plan for context 2048 x 2 sequences:" "$tmp/o"
check "the GPU plan has its six lines" test "$(grep -cE '^  (weights|KV cache|recurrent state|scratch|other|total) ' "$tmp/o")" -eq 6
check "the GPU plan's KV cache is float32, attention layers only" grep -q "^  KV cache .*(full-attention layers only, float32)" "$tmp/o"
LILAC_CUDA_PREFILL_CHUNK=2048 "$lilac" plan -m "$model" --ctx 2048 --parallel 2 --backend cuda >"$tmp/o2" 2>&1
check "LILAC_CUDA_PREFILL_CHUNK=2048: the GPU plan counts 2048-token chunks" grep -q "^prefill chunks of up to 2048 tokens$" "$tmp/o2"
if grep -q "^no CUDA device to compare with: ." "$tmp/o"; then
    check "without a GPU plan --backend cuda exits 1" test $rc -eq 1
    check "without a GPU the plan's prefill chunk is 512 tokens (nothing fits)" grep -q "^prefill chunks of up to 512 tokens$" "$tmp/o"
else
    check "with a GPU the plan names it and its free memory" grep -qE "^gpu: .* GiB free" "$tmp/o"
    check "with a GPU the plan gives the tiny model 2048-token prefill chunks" grep -q "^prefill chunks of up to 2048 tokens$" "$tmp/o"
    LILAC_CUDA_PREFILL_AUTO=0 "$lilac" plan -m "$model" --ctx 2048 --parallel 2 --backend cuda >"$tmp/o2" 2>&1
    check "LILAC_CUDA_PREFILL_AUTO=0: 512-token chunks" grep -q "^prefill chunks of up to 512 tokens$" "$tmp/o2"
    LILAC_GPU_MEM_LIMIT=64M "$lilac" plan -m "$model" --ctx 2048 --backend cuda >"$tmp/o" 2>&1
    check "a GPU plan over LILAC_GPU_MEM_LIMIT exits 1" test $? -eq 1
    check "a GPU plan over LILAC_GPU_MEM_LIMIT says it does not fit" grep -q "^does NOT fit" "$tmp/o"
    LILAC_GPU_MEM_LIMIT=64M "$lilac" run -m "$model" --backend cuda -p "hi" -n 1 >"$tmp/o" 2>"$tmp/e"
    check "run on the GPU over LILAC_GPU_MEM_LIMIT fails with status 1" test $? -eq 1
    check "the GPU refusal gives the numbers and the fix" grep -q "GiB of GPU memory .* GiB available (a limit applies); " "$tmp/e"
fi

# lilac chat keeps the sequence between turns: a turn feeds only its own tokens
printf 'Hello there\nAnd a second turn of the conversation\n' |
    "$lilac" chat -m "$model" -n 8 --seed 3 --no-think >"$tmp/chat.out" 2>"$tmp/chat.err"
check "chat exits 0" test $? -eq 0
mapfile -t prompts < <(grep -o "prompt [0-9]* tokens" "$tmp/chat.err" | awk '{print $2}')
check "chat answered two turns" test ${#prompts[@]} -eq 2
# turn 2 = "<|im_end|>\n<|im_start|>user\n" + 7 words + "<|im_end|>\n<|im_start|>assistant\n<think>..."
check "the second turn costs only its new tokens (${prompts[1]:-?})" test "${prompts[1]:-99}" -lt 30
check "chat output is well-formed UTF-8" python3 -c "open('$tmp/chat.out','rb').read().decode('utf-8')"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
