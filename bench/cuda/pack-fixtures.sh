#!/usr/bin/env bash
# Copy the fixtures the CUDA tests read into DEST (default .devfix, which
# git ignores), small enough to travel with the work tree to the GPU
# machine (64 MiB in all there): the bf16 and Q4_K_M tiny-qwen35moe files,
# the bf16 tiny-qwen3moe file, and their goldens.
#
#   bench/cuda/pack-fixtures.sh [DEST]
#   bench/cuda/pack-fixtures.sh --suite PACK [DEST]   (DEST default .devfix-PACK)
#
# --suite: the files the CPU golden tests read for one model, for running
# them on the GPU with the backend forced to CUDA (run.sh suite, with
# LILAC_TEST_MODELS naming the model): the whole fixtures do not fit one
# carry. PACK: golden-35 / golden-3 (test_golden: the HF checkpoint, the
# bf16 GGUF, the goldens of tiny-qwen35moe / tiny-qwen3moe), quant-35 /
# quant-3 (test_quant_models: the quantized GGUFs and their goldens).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${LILAC_FIXTURES:-$root/../shared/fixtures}
if [ "${1:-}" = "--suite" ]; then
    pack=${2:?--suite wants a pack: golden-35, golden-3, quant-35 or quant-3}
    dest=${3:-$root/.devfix-$pack}
    case $pack in
    golden-35 | quant-35) m=tiny-qwen35moe ;;
    golden-3 | quant-3) m=tiny-qwen3moe ;;
    *) echo "unknown pack $pack (golden-35, golden-3, quant-35, quant-3)" >&2; exit 2 ;;
    esac
    rm -rf "$dest"
    mkdir -p "$dest/$m/gguf"
    cp -r "$src/$m/golden" "$dest/$m/"
    case $pack in
    golden-*) cp -r "$src/$m/hf" "$dest/$m/" && cp "$src/$m/gguf/model-bf16.gguf" "$dest/$m/gguf/" ;;
    quant-*) find "$src/$m/gguf" -name 'model-Q*.gguf' -exec cp {} "$dest/$m/gguf/" \; ;;
    esac
    du -sh "$dest"
    exit 0
fi
dest=${1:-$root/.devfix}
rm -rf "$dest"
for m in tiny-qwen35moe tiny-qwen3moe; do
    mkdir -p "$dest/$m/gguf" "$dest/$m/golden"
    cp "$src/$m/gguf/model-bf16.gguf" "$dest/$m/gguf/"
    cp "$src/$m/golden/meta.json" "$src/$m/golden/logits.f32" "$dest/$m/golden/"
done
cp "$src/tiny-qwen35moe/gguf/model-Q4_K_M.gguf" "$dest/tiny-qwen35moe/gguf/"
cp "$src/tiny-qwen35moe/golden/exact-logits-Q4_K_M.f32" "$dest/tiny-qwen35moe/golden/"
du -sh "$dest"
