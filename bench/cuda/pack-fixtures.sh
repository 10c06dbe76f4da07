#!/usr/bin/env bash
# Copy the fixtures the CUDA tests read into DEST (default .devfix, which
# git ignores), small enough to travel with the work tree to the GPU
# machine (64 MiB in all there): the bf16 and Q4_K_M tiny-qwen35moe files,
# the bf16 tiny-qwen3moe file, and their goldens.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${LILAC_FIXTURES:-$root/../shared/fixtures}
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
