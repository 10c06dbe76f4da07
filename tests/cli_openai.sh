#!/usr/bin/env bash
# cli_openai: `lilac serve` against the official OpenAI Node.js client
# (the `openai` npm package, pinned by tests/openai/package-lock.json).
# tests/openai/client.test.mjs starts the servers and runs the checks: models,
# chat (whole and streamed, with usage), completions, tools, logprobs, errors
# as the client's error classes, --api-key, a clean SIGTERM.
#
#   bash tests/cli_openai.sh LILAC_BINARY SOURCE_DIR
#
# Needs node (>= 18) and npm (scripts/setup.sh installs them); `npm ci`
# installs the locked client into a scratch copy of tests/openai (from npm's
# cache when it has the package, so a second run needs no network). Fails when
# node or npm is missing; skips (77) only when the fixture model is missing.
set -u

LILAC=${1:?usage: cli_openai.sh LILAC_BINARY SOURCE_DIR}
SRC=${2:?usage: cli_openai.sh LILAC_BINARY SOURCE_DIR}
if [ ! -x "$LILAC" ]; then
    echo "cli_openai: $LILAC is not an executable" >&2
    exit 1
fi
LILAC=$(cd "$(dirname "$LILAC")" && pwd)/$(basename "$LILAC")

for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "cli_openai: FAIL: '$tool' is not installed; this test needs Node.js (>= 18) and npm" >&2
        echo "cli_openai: install them with: bash scripts/setup.sh (or apt-get install nodejs npm)" >&2
        exit 1
    fi
done
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 18 ]; then
    echo "cli_openai: FAIL: node $(node --version 2>/dev/null) is too old; this test needs Node.js >= 18" >&2
    exit 1
fi

fx=${LILAC_FIXTURES:-$SRC/../shared/fixtures}
model=$fx/tiny-qwen35moe/gguf/model-Q4_K_M.gguf
if [ ! -f "$model" ]; then
    echo "SKIP: fixture model not found at $model"
    exit 77
fi
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")

T=$(mktemp -d "${TMPDIR:-/tmp}/lilac-cli-openai-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

# A copy, so that runs from several build trees at once do not share (and
# npm ci does not delete under another run) one node_modules.
cp "$SRC/tests/openai/package.json" "$SRC/tests/openai/package-lock.json" "$SRC/tests/openai/client.test.mjs" "$T/" ||
    exit 1
echo "cli_openai: node $(node --version), npm $(npm --version); npm ci in $T"
if ! (cd "$T" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error); then
    echo "cli_openai: FAIL: 'npm ci' could not install the openai client locked in tests/openai/package-lock.json" >&2
    echo "cli_openai: (it needs the npm registry once; later runs use npm's cache)" >&2
    exit 1
fi

# The checks give each step two minutes; this bounds the whole run (servers
# included: the test kills them when it is stopped).
runner=()
command -v timeout >/dev/null 2>&1 && runner=(timeout -k 10 600)
(cd "$T" && "${runner[@]}" node --test-reporter=spec client.test.mjs "$LILAC" "$model")
rc=$?
if [ "$rc" -eq 124 ]; then
    echo "cli_openai: FAIL: the client test did not finish within 600 s" >&2
fi
[ "$rc" -eq 0 ] && echo "cli_openai: all checks passed" || echo "cli_openai: FAIL (status $rc)"
exit "$rc"
