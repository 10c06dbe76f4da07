#!/usr/bin/env bash
# The GPU machine's image has no jansson, PCRE2 or utf8proc and nothing can
# be installed there: fetch Debian's packages here and unpack them into
# .deps (git-ignored), to travel with the work tree (`carry: [".deps"]`).
# bench/cuda/run.sh points pkg-config and the loader at them.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2)
rm -rf "$root/.deps"
for f in "$tmp"/*.deb; do dpkg -x "$f" "$root/.deps"; done
find "$root/.deps" -name '*.a' -delete
rm -rf "$root/.deps/usr/share" "$tmp"
du -sh "$root/.deps"
