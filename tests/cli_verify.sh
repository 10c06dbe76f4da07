#!/usr/bin/env bash
# cli_verify: `lilac verify` against coreutils' sha256sum on the same files
# (made here: empty, several read chunks, odd names, two split-GGUF-like
# shards). Plain sums must equal sha256sum's output byte for byte; --sha256
# and --manifest (made by sha256sum, also -b, --tag and CRLF) must say OK or
# FAILED with the right exit status; missing files, missing manifest lines,
# malformed manifests and bad hashes must give one "lilac: error:" line.
#
#   bash tests/cli_verify.sh LILAC_BINARY SOURCE_DIR
set -u

LILAC=${1:?usage: cli_verify.sh LILAC_BINARY SOURCE_DIR}
if [ ! -x "$LILAC" ]; then
    echo "cli_verify: $LILAC is not an executable" >&2
    exit 1
fi
LILAC=$(cd "$(dirname "$LILAC")" && pwd)/$(basename "$LILAC") # the tests cd about
if ! command -v sha256sum >/dev/null; then
    echo "SKIP: sha256sum (coreutils) not found"
    exit 77
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/lilac-cli-verify-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

pass=0
fail=0

ok() {
    pass=$((pass + 1))
    echo "ok   $1"
}
bad() {
    fail=$((fail + 1))
    echo "FAIL $1: $2"
    sed 's/^/     stdout: /' "$T/stdout" | head -n 10
    sed 's/^/     stderr: /' "$T/stderr" | head -n 10
}

# run WANT_RC LABEL -- COMMAND...: run it, capturing stdout and stderr; 0 if the exit status is WANT_RC
run() {
    local want=$1 label=$2
    shift 3
    "$@" >"$T/stdout" 2>"$T/stderr"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        bad "$label" "exit status $rc, expected $want"
        return 1
    fi
    return 0
}

# stdout_is LABEL EXPECTED_FILE: stdout equals the file and stderr is empty
stdout_is() {
    if ! cmp -s "$T/stdout" "$2"; then
        bad "$1" "stdout differs from the expected text"
        diff "$2" "$T/stdout" | head -n 10 | sed 's/^/     diff: /'
    elif [ -s "$T/stderr" ]; then
        bad "$1" "stderr is not empty (no terminal: nothing but errors belongs there)"
    else
        ok "$1"
    fi
}

# one_error LABEL TEXT...: stderr is exactly one "lilac: error:" line holding every TEXT
one_error() {
    local label=$1 first n
    shift
    first=$(head -n 1 "$T/stderr")
    n=$(wc -l <"$T/stderr")
    case "$first" in
        "lilac: error: "*) ;;
        *) bad "$label" "stderr does not start with 'lilac: error: '"; return ;;
    esac
    if [ "$n" -ne 1 ]; then
        bad "$label" "stderr has $n lines, expected 1"
        return
    fi
    local t
    for t in "$@"; do
        case "$first" in
            *"$t"*) ;;
            *) bad "$label" "the error line does not hold '$t'"; return ;;
        esac
    done
    ok "$label: $first"
}

# stdout_has LABEL TEXT: some line of stdout is exactly TEXT
stdout_has() {
    if grep -qxF -- "$2" "$T/stdout"; then
        ok "$1"
    else
        bad "$1" "no stdout line '$2'"
    fi
}

# ---- the files ----
D=$T/dl
mkdir "$D"
: >"$D/empty.bin"
printf 'abc' >"$D/abc.txt"
# several 4 MiB read chunks and a short last one; random, so nothing in the code can lean on a pattern
{
    printf 'GGUF\003\000\000\000'
    head -c $((9 * 1024 * 1024 + 4321)) /dev/urandom
} >"$D/m-00001-of-00002.gguf"
head -c 777777 /dev/urandom >"$D/m-00002-of-00002.gguf"
printf 'spaces' >"$D/with two  spaces.bin"
printf 'backslash' >"$D/back\\slash.bin"
H_ABC=ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad

# ---- plain sums: what sha256sum prints ----
cd "$D" || exit 1
files=(empty.bin abc.txt m-00001-of-00002.gguf m-00002-of-00002.gguf "with two  spaces.bin" "back\\slash.bin")
sha256sum "${files[@]}" >"$T/want"
run 0 "sums of six files" -- "$LILAC" verify "${files[@]}" && stdout_is "sums equal sha256sum's output" "$T/want"
sha256sum "$D/abc.txt" >"$T/want"
run 0 "sum by absolute path" -- "$LILAC" verify "$D/abc.txt" && stdout_is "absolute path as sha256sum" "$T/want"
printf 'piped' >"$T/piped"
sha256sum - <"$T/piped" >"$T/want"
run 0 "sum of standard input" -- "$LILAC" verify - <"$T/piped" && stdout_is "'-' is standard input" "$T/want"

# ---- --sha256 ----
run 0 "--sha256 right" -- "$LILAC" verify abc.txt --sha256 "$H_ABC" &&
    printf 'abc.txt: OK\n' >"$T/want" && stdout_is "--sha256 right: OK" "$T/want"
run 0 "--sha256 in upper case" -- "$LILAC" verify --sha256 "${H_ABC^^}" abc.txt &&
    stdout_is "--sha256 upper case: OK" "$T/want"
H_E=$(sha256sum empty.bin | cut -c1-64)
if run 1 "--sha256 wrong" -- "$LILAC" verify abc.txt --sha256 "$H_E"; then
    printf 'abc.txt: FAILED (expected %s, got %s)\n' "$H_E" "$H_ABC" >"$T/want"
    stdout_is "--sha256 wrong: FAILED with both hashes" "$T/want"
fi
run 2 "--sha256 of 63 digits" -- "$LILAC" verify abc.txt --sha256 "${H_ABC:0:63}" &&
    one_error "--sha256 of 63 digits" "64 hex digits" "63"
run 2 "--sha256 not hex" -- "$LILAC" verify abc.txt --sha256 "x${H_ABC:1}" &&
    one_error "--sha256 not hex" "'x'" "not a hex digit"
run 2 "--sha256 with two files" -- "$LILAC" verify abc.txt empty.bin --sha256 "$H_ABC" &&
    one_error "--sha256 with two files" "exactly one FILE"
run 2 "--sha256 without a value" -- "$LILAC" verify abc.txt --sha256 && one_error "--sha256 without a value" "--sha256"
run 1 "--sha256 of a missing file" -- "$LILAC" verify nope.gguf --sha256 "$H_ABC" &&
    one_error "--sha256 of a missing file" "nope.gguf" "No such file or directory"

# ---- --manifest made by sha256sum ----
sha256sum m-00001-of-00002.gguf m-00002-of-00002.gguf abc.txt >"$D/SHA256SUMS"
cd "$T" || exit 1
{
    printf '%s: OK\n' dl/m-00001-of-00002.gguf dl/m-00002-of-00002.gguf dl/abc.txt
    printf '3 files checked: 3 OK, 0 FAILED, 0 unreadable\n'
} >"$T/want"
run 0 "--manifest, every file it lists" -- "$LILAC" verify --manifest dl/SHA256SUMS &&
    stdout_is "--manifest checks each file beside it" "$T/want"
{
    printf '%s: OK\n' dl/m-00002-of-00002.gguf dl/m-00001-of-00002.gguf
    printf '2 files checked: 2 OK, 0 FAILED, 0 unreadable\n'
} >"$T/want"
run 0 "--manifest, two shards given" -- "$LILAC" verify dl/m-00002-of-00002.gguf dl/m-00001-of-00002.gguf \
    --manifest dl/SHA256SUMS && stdout_is "--manifest finds shards by base name" "$T/want"

(cd dl && sha256sum -b m-00001-of-00002.gguf m-00002-of-00002.gguf) >"$T/binary.sums"
(cd dl && sha256sum --tag m-00001-of-00002.gguf m-00002-of-00002.gguf) >"$T/tag.sums"
sed 's/$/\r/' dl/SHA256SUMS >"$T/crlf.sums"
for kind in binary tag crlf; do
    run 0 "--manifest ($kind)" -- "$LILAC" verify dl/m-00001-of-00002.gguf dl/m-00002-of-00002.gguf \
        --manifest "$T/$kind.sums" && stdout_has "--manifest ($kind): OK" "dl/m-00002-of-00002.gguf: OK"
done
if run 0 "sums of the shards" -- "$LILAC" verify dl/m-0000*-of-00002.gguf; then
    if sha256sum --quiet --strict -c "$T/stdout" >/dev/null 2>&1; then ok "sha256sum -c accepts lilac's sums"; else
        bad "sha256sum -c accepts lilac's sums" "sha256sum -c failed"; fi
fi

# a file the manifest does not list: named, and nothing hashed
if run 1 "--manifest without the file's line" -- "$LILAC" verify dl/abc.txt dl/empty.bin --manifest dl/SHA256SUMS; then
    one_error "--manifest without the file's line" "dl/empty.bin" "not listed"
    if [ -s "$T/stdout" ]; then bad "nothing checked when a line is missing" "stdout not empty"; else
        ok "nothing checked when a line is missing"; fi
fi

# a file the manifest lists but the download lacks
mkdir "$T/partial"
cp dl/SHA256SUMS dl/m-00001-of-00002.gguf dl/abc.txt "$T/partial/"
if run 1 "--manifest, a shard missing" -- "$LILAC" verify --manifest partial/SHA256SUMS; then
    one_error "--manifest, a shard missing" "partial/m-00002-of-00002.gguf" "No such file or directory"
    stdout_has "--manifest, a shard missing: the rest OK" "partial/m-00001-of-00002.gguf: OK"
    stdout_has "--manifest, a shard missing: summary" "3 files checked: 2 OK, 0 FAILED, 1 unreadable"
fi

# a corrupted shard: one byte changed in the middle
mkdir "$T/bad"
cp dl/SHA256SUMS dl/m-0000*-of-00002.gguf dl/abc.txt "$T/bad/"
chmod u+w "$T/bad/m-00002-of-00002.gguf"
old=$(dd if=bad/m-00002-of-00002.gguf bs=1 skip=400000 count=1 status=none | od -An -tu1 | tr -d ' ')
printf "\\$(printf '%03o' $(((old + 1) % 256)))" | dd of=bad/m-00002-of-00002.gguf bs=1 seek=400000 conv=notrunc \
    status=none
want_h=$(grep m-00002 dl/SHA256SUMS | cut -c1-64)
got_h=$(sha256sum bad/m-00002-of-00002.gguf | cut -c1-64)
if [ "$want_h" = "$got_h" ]; then
    bad "corrupting a shard" "the byte was not changed"
elif run 1 "--manifest, a corrupted shard" -- "$LILAC" verify --manifest bad/SHA256SUMS; then
    stdout_has "corrupted shard FAILED, both hashes" \
        "bad/m-00002-of-00002.gguf: FAILED (expected $want_h, got $got_h)"
    stdout_has "the good shard still OK" "bad/m-00001-of-00002.gguf: OK"
    stdout_has "corrupted shard: summary" "3 files checked: 2 OK, 1 FAILED, 0 unreadable"
    if [ -s "$T/stderr" ]; then bad "a FAILED hash is no error" "stderr not empty"
    else ok "a FAILED hash is no error"; fi
fi

# malformed manifests
{
    cat dl/SHA256SUMS
    echo "this line is not a sum"
} >"$T/garbage.sums"
run 1 "--manifest malformed" -- "$LILAC" verify --manifest "$T/garbage.sums" &&
    one_error "--manifest malformed" "garbage.sums:4:" "malformed"
sed '2s/^./z/' dl/SHA256SUMS >"$T/nonhex.sums"
run 1 "--manifest with a non-hex hash" -- "$LILAC" verify --manifest "$T/nonhex.sums" &&
    one_error "--manifest with a non-hex hash" "nonhex.sums:2:" "'z'"
sed '3s/^.//' dl/SHA256SUMS >"$T/odd.sums"
run 1 "--manifest with a 63-digit hash" -- "$LILAC" verify --manifest "$T/odd.sums" &&
    one_error "--manifest with a 63-digit hash" "odd.sums:3:" "63"
run 1 "--manifest that does not exist" -- "$LILAC" verify --manifest "$T/none.sums" &&
    one_error "--manifest that does not exist" "none.sums" "No such file or directory"
run 1 "a model given as the manifest" -- "$LILAC" verify --manifest dl/m-00001-of-00002.gguf &&
    one_error "a model given as the manifest" "m-00001-of-00002.gguf:1:"

# ---- files that cannot be read ----
run 1 "a nonexistent file" -- "$LILAC" verify "$T/missing.gguf" &&
    one_error "a nonexistent file" "$T/missing.gguf" "No such file or directory"
if run 1 "one file of two missing" -- "$LILAC" verify dl/abc.txt "$T/missing.gguf"; then
    one_error "one file of two missing" "missing.gguf"
    stdout_has "the other is still summed" "$H_ABC  dl/abc.txt"
fi
run 1 "a directory" -- "$LILAC" verify dl && one_error "a directory" "dl" "directory"

# ---- usage ----
run 2 "no FILE" -- "$LILAC" verify && one_error "no FILE" "no FILE given"
run 2 "unknown option" -- "$LILAC" verify --bogus abc.txt && one_error "unknown option" "'--bogus'"
run 2 "--sha256 and --manifest" -- "$LILAC" verify abc.txt --sha256 "$H_ABC" --manifest x &&
    one_error "--sha256 and --manifest" "one --sha256 or one --manifest"
run 0 "--help" -- "$LILAC" verify --help && stdout_has "--help: usage" \
    "usage: lilac verify FILE... [--sha256 HEX | --manifest SUMS]"
run 0 "lilac --help" -- "$LILAC" --help && if grep -q '^  verify FILE' "$T/stdout"; then ok "lilac --help lists verify"
else bad "lilac --help lists verify" "no verify line"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
