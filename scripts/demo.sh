#!/usr/bin/env bash
# Set up, build, and run lilac on a model that ships with the tests: the
# shared fixtures' tiny Qwen3.5-MoE GGUF when present, else a tiny model
# of tests/data.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build build-release -j"$(nproc 2>/dev/null || echo 2)"

fixtures=${LILAC_FIXTURES:-$root/../shared/fixtures}
model=$fixtures/tiny-qwen35moe/gguf/model-bf16.gguf
tokens=1615,1892,1721,1286,1283,1347,1287,279
[ -f "$model" ] || { model=$root/tests/data/variants/q35-a-fused/hf; tokens=1,2,3,4,5,6,7,8; }

set -x
./build-release/lilac info "$model"
./build-release/lilac logits -m "$model" --tokens "$tokens"
