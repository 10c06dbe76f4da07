#!/usr/bin/env bash
# cli_batch: `lilac batch`, killed and resumed. The input: 100 requests
# (chat and completion lines, max_tokens 32), one malformed line and one
# line that repeats an earlier id. The run gets SIGKILL when the output has
# 40-60 lines (a torn last line is added if the kill left none), and a
# second run with the same output file finishes it. Then: every output line
# is a JSON object with an "id" and a "response" or an "error"; each of the
# 100 ids has exactly one line, a response with one choice of the right
# object type; the malformed line has one invalid_json error under the id
# "line:N"; the repeated id has one duplicate_id error; nothing else. The
# same (id, outcome) pairs as an uninterrupted run. A third run on the
# finished file redoes nothing: the file is unchanged byte for byte. Last, a
# state a kill can leave (a repeated id's error written, the first
# request's answer not yet) must still get the first request answered.
#
#   bash tests/cli_batch.sh LILAC_BINARY SOURCE_DIR
set -u
export LC_ALL=C # sort

LILAC=${1:?usage: cli_batch.sh LILAC_BINARY SOURCE_DIR}
SRC=${2:?usage: cli_batch.sh LILAC_BINARY SOURCE_DIR}
if [ ! -x "$LILAC" ]; then
    echo "cli_batch: $LILAC is not an executable" >&2
    exit 1
fi
if ! command -v jq >/dev/null; then
    echo "SKIP: jq not found (scripts/setup.sh installs it)"
    exit 77
fi
FX=${LILAC_FIXTURES:-$SRC/../shared/fixtures}
MODEL=$FX/tiny-qwen35moe/gguf/model-Q4_K_M.gguf
if [ ! -f "$MODEL" ]; then
    echo "SKIP: fixture model not found at $MODEL (set LILAC_FIXTURES or place the fixtures at $SRC/../shared/fixtures)"
    exit 77
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/lilac-cli-batch-XXXXXX") || exit 1
BPID=""
cleanup() {
    if [ -n "$BPID" ]; then
        kill -KILL "$BPID" 2>/dev/null
        wait "$BPID" 2>/dev/null
    fi
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pass=0
fail=0
ok() {
    pass=$((pass + 1))
    echo "ok   $1"
}
bad() {
    fail=$((fail + 1))
    echo "FAIL $1: $2"
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

# run_batch LABEL IN OUT: a whole run in the foreground; sets RC, stderr in $T/LABEL.err
run_batch() {
    local t0
    t0=$(now)
    "$LILAC" batch -m "$MODEL" -i "$2" -o "$3" --parallel 4 -t 2 2>"$T/$1.err"
    RC=$?
    echo "     $1: exit status $RC after $(elapsed "$t0") s: $(tail -n 1 "$T/$1.err")"
}

# ---- the input: line numbers are 1-based ----
MALFORMED_LINE=21 # after r20
DUP_LINE=97       # after r95: the first run is killed before it gets there
DUP_ID=r5
{
    for i in $(seq 100); do
        if [ $((i % 3)) = 0 ]; then
            printf '{"id": "r%d", "prompt": "Once upon a time, number %d,", "max_tokens": 32}\n' "$i" "$i"
        else
            printf '{"id": "r%d", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Question %d: what is %d + %d?"}], "max_tokens": 32}\n' \
                "$i" "$i" "$i" "$i"
        fi
        [ "$i" = 20 ] && printf '{"id": "broken", "messages": [{"role": "user", "content": "cut here\n'
        [ "$i" = 95 ] && printf '{"id": "%s", "prompt": "the same id again", "max_tokens": 4}\n' "$DUP_ID"
    done
} >"$T/in.jsonl"
m_line=$(sed -n "${MALFORMED_LINE}p" "$T/in.jsonl")
d_line=$(sed -n "${DUP_LINE}p" "$T/in.jsonl")
if [ "${m_line:0:15}" != '{"id": "broken"' ] || [ "${d_line:0:11}" != "{\"id\": \"$DUP_ID\"" ] ||
    [ "$(lines "$T/in.jsonl")" != 102 ]; then
    echo "cli_batch: the input is not as this script expects" >&2
    exit 1
fi
N_OUT=102 # 100 answers, the malformed line's error, the repeated id's error

# ---- run 1: killed at 40-60 lines ----
OUT=$T/out.jsonl
t0=$(now)
"$LILAC" batch -m "$MODEL" -i "$T/in.jsonl" -o "$OUT" --parallel 4 -t 2 2>"$T/run1.err" &
BPID=$!
killed=""
for i in $(seq 1500); do # 30 s at most
    n=$(lines "$OUT")
    if [ "$n" -ge 40 ] && [ "$n" -le 60 ]; then
        kill -KILL "$BPID" 2>/dev/null && killed=$n
        break
    fi
    kill -0 "$BPID" 2>/dev/null || break
    if [ "$n" -gt 60 ]; then break; fi
    sleep 0.02
done
wait "$BPID"
rc1=$?
BPID=""
n1=$(lines "$OUT")
if [ -n "$killed" ] && [ "$rc1" = 137 ]; then
    ok "run 1 killed (SIGKILL) after $(elapsed "$t0") s with $n1 lines written"
elif [ "$rc1" -gt 128 ]; then
    bad "run 1" "it died by itself, signal $((rc1 - 128)), with $n1 lines written: $(grep -v '^$' "$T/run1.err" | tail -n 2 | tr '\n' ' ')"
else
    echo "     run 1 ended (exit status $rc1, $n1 lines) before it could be killed at 40-60 lines: simulating the kill"
    head -n 50 "$OUT" >"$T/cut" && cat "$T/cut" >"$OUT"
fi
if [ -s "$OUT" ] && [ "$(tail -c 1 "$OUT" | od -An -c | tr -d ' ')" = '\n' ]; then
    # no torn line from the kill: add one, as a kill inside a write leaves
    printf '{"id": "r99", "response": {"id": "chatcmpl-torn", "obj' >>"$OUT"
    echo "     added a torn last line"
fi

# ---- run 2: the rest ----
run_batch run2 "$T/in.jsonl" "$OUT"
if [ "$RC" = 0 ] || [ "$RC" = 3 ]; then ok "run 2 (resumed) finished: exit status $RC"; else
    bad "run 2 (resumed)" "exit status $RC: $(grep -v '^$' "$T/run2.err" | tail -n 2 | tr '\n' ' ')"; fi

# ---- the finished file ----
# check_out LABEL FILE: every check of a finished output file
check_out() {
    local label=$1 f=$2 n_bad
    n_bad=$(jq -Rr '(fromjson? | objects | select(has("id") and ((has("response") and (has("error") | not)) or
        (has("error") and (has("response") | not)))) | "ok") // "bad"' "$f" | grep -vc '^ok$')
    if [ "$n_bad" = 0 ]; then ok "$label: every line is a JSON object with an id and a response or an error"; else
        bad "$label" "$n_bad lines are not JSON objects with an id and one of response, error"
        jq -Rr 'select(([fromjson? | objects] | length) == 0)' "$f" | head -n 3 | cut -c1-200 | sed 's/^/     line: /'
        return
    fi
    jq -r '[(.id | tostring), (if has("response") then "response" else "error:" + (.error.code // "null") end)] | @tsv' \
        "$f" | sort >"$T/$label.pairs"
    local n
    n=$(lines "$f")
    if [ "$n" = "$N_OUT" ]; then ok "$label: $n lines"; else bad "$label" "$n lines, expected $N_OUT"; fi
    # each of the 100 ids exactly once as a response
    seq 100 | sed 's/^/r/' | sort >"$T/want-ids"
    awk -F'\t' '$2 == "response" { print $1 }' "$T/$label.pairs" >"$T/$label.resp-ids"
    if cmp -s "$T/want-ids" "$T/$label.resp-ids"; then ok "$label: r1..r100 each have exactly one response"; else
        bad "$label" "the response ids are not r1..r100 once each: $(diff "$T/want-ids" "$T/$label.resp-ids" | grep '^[<>]' | head -n 6 | tr '\n' ' ')"
    fi
    local n_choice
    n_choice=$(jq -c 'select(has("response")) | .response as $r | .id as $id |
        select(($r.choices | type == "array" and length == 1) and
               ($r.object == (if ($id | ltrimstr("r") | tonumber) % 3 == 0 then "text_completion" else "chat.completion" end)) and
               ($r.choices[0].finish_reason | type == "string")) | 1' "$f" | wc -l)
    if [ "$n_choice" = 100 ]; then ok "$label: each response has one choice, a finish_reason and the right object type"; else
        bad "$label" "$n_choice of 100 responses have one choice, a finish_reason and the right object"; fi
    local got
    got=$(awk -F'\t' '$2 != "response"' "$T/$label.pairs" | tr '\t\n' ': ')
    # the repeated id's error may name the id or its line
    case $got in
    "line:$MALFORMED_LINE:error:invalid_json $DUP_ID:error:duplicate_id " | \
        "line:$MALFORMED_LINE:error:invalid_json line:$DUP_LINE:error:duplicate_id ")
        ok "$label: the errors: line:$MALFORMED_LINE invalid_json, line $DUP_LINE ($DUP_ID) duplicate_id" ;;
    *)
        bad "$label" "the error lines (id:error:code) are '$got', expected line:$MALFORMED_LINE invalid_json and one duplicate_id for line $DUP_LINE ($DUP_ID)" ;;
    esac
}
check_out resumed "$OUT"

# ---- run 3: nothing to redo ----
cp "$OUT" "$T/before-run3"
run_batch run3 "$T/in.jsonl" "$OUT"
if [ "$RC" = 0 ]; then ok "run 3 on the finished file: exit status 0"; else bad "run 3" "exit status $RC"; fi
if cmp -s "$T/before-run3" "$OUT"; then ok "run 3 left the file unchanged, byte for byte"; else
    bad "run 3" "the file changed: $(diff "$T/before-run3" "$OUT" | head -n 4 | cut -c1-160 | tr '\n' ' ')"; fi
if grep -q "102 requests: 0 answered, 0 failed" "$T/run3.err"; then ok "run 3 answered nothing anew"; else
    bad "run 3" "its summary: $(tail -n 1 "$T/run3.err")"; fi

# ---- the same outcome as an uninterrupted run ----
run_batch full "$T/in.jsonl" "$T/full.jsonl"
if [ "$RC" -gt 128 ]; then
    bad "uninterrupted run" "killed by signal $((RC - 128)) after $(lines "$T/full.jsonl") lines: $(grep -v '^$' "$T/full.err" | tail -n 2 | tr '\n' ' ')"
else
    if [ "$RC" = 3 ]; then ok "uninterrupted run: exit status 3 (some lines failed)"; else
        bad "uninterrupted run" "exit status $RC, expected 3: $(grep -v '^$' "$T/full.err" | tail -n 2 | tr '\n' ' ')"; fi
    check_out uninterrupted "$T/full.jsonl"
    if [ -f "$T/resumed.pairs" ] && [ -f "$T/uninterrupted.pairs" ] && cmp -s "$T/resumed.pairs" "$T/uninterrupted.pairs"; then
        ok "killed and resumed: the same (id, outcome) lines as uninterrupted"
    else
        bad "killed and resumed vs uninterrupted" "the (id, outcome) lines differ (< uninterrupted, > resumed): $(diff "$T/uninterrupted.pairs" "$T/resumed.pairs" 2>&1 | grep '^[<>]' | head -n 4 | tr '\t\n' ': ')"
    fi
fi

# ---- a kill between a repeated id's error and the first request's answer ----
# The repeated id's error is written when its line is read, while the first
# request with that id may still be running: a kill there leaves only the
# error line. The resumed run must still answer the first request.
printf '%s\n' '{"id": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32}' \
    '{"id": "a", "prompt": "again", "max_tokens": 4}' >"$T/dup.jsonl"
run_batch dup-full "$T/dup.jsonl" "$T/dup-full.jsonl"
if [ "$(jq -r 'if has("response") then "response" else .error.code end' "$T/dup-full.jsonl" | tr '\n' ' ')" = "duplicate_id response " ]; then
    head -n 1 "$T/dup-full.jsonl" >"$T/dup-cut.jsonl" # what a kill right after the first write leaves
    run_batch dup-resumed "$T/dup.jsonl" "$T/dup-cut.jsonl"
    if [ "$(jq -r 'select(has("response")) | .id' "$T/dup-cut.jsonl")" = a ]; then
        ok "resumed after the repeated id's error: the first request is answered"
    else
        bad "resumed after the repeated id's error" "no response for id a: $(cut -c1-160 "$T/dup-cut.jsonl" | tr '\n' ' ')"
    fi
else
    echo "     (the uninterrupted run did not write the duplicate's error first; that state cannot arise: skipped)"
fi

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    exit 1
fi
exit 0
