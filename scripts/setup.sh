#!/usr/bin/env bash
# Install the Debian packages lilac builds, tests and fuzzes with. Does
# nothing when they are all present; otherwise runs apt-get (as root, or
# through sudo).
set -euo pipefail

# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user-static: the NEON
# kernels' test (tests/neon/run.sh) cross-compiles and runs under qemu.
# nodejs, npm: tests/cli_openai.sh runs the official openai npm client; npm
# only when none is on PATH (NodeSource's nodejs bundles it and conflicts
# with Debian's npm package).
packages=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libssl-dev clang libclang-rt-14-dev curl jq
          gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
          nodejs $(command -v npm >/dev/null 2>&1 || echo npm))

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
