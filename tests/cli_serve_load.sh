#!/usr/bin/env bash
# cli_serve_load: `lilac serve` under a burst, and its supervisor.
#  1. Burst: --parallel 2 --queue 2 and 16 concurrent chat requests. Each
#     ends (none hangs past curl's 30 s) with 200 and a whole answer, 429 with
#     Retry-After (queue_full), or 503 with Retry-After; at least one 200 and
#     one 429; /metrics counts each 429 as a queue_full rejection and each 200
#     as completed; the server still answers.
#  2. A killed engine: the supervised child (pid from its child_ready line)
#     gets SIGKILL mid-stream; the stream breaks, the supervisor stays, logs
#     child_exited with "signal":"SIGKILL", answers /health 503 (Retry-After)
#     while it restarts and 200 within 10 s, and a new request succeeds.
#  3. Drain: SIGTERM to the supervisor while a request and a stream run and
#     a second stream waits: all three finish whole (200, all tokens; the
#     streams with a finish_reason chunk and data: [DONE]),
#     new requests get 503 server_draining meanwhile, and the supervisor
#     exits 0 within --grace 150, logging stopped with "killed":false. (The
#     grace is long so that a slow build, ASan in CI, finishes its work: at
#     60 s the waiting stream was cut at 218 of 600 tokens on 2 cores once.)
#  4. Eight rounds of a stream that ends as the drain ends: each must end
#     with data: [DONE] (the engine must not close connections that are
#     still sending; without that, rounds fail at random, one in 2-8 here).
#
#   bash tests/cli_serve_load.sh LILAC_BINARY SOURCE_DIR
set -u

NAME=cli_serve_load
# shellcheck source=tests/serve_lib.sh
. "$(dirname "$0")/serve_lib.sh" "$@"
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

metric() { # NAME_WITH_LABELS: its value in /metrics
    curl -s --max-time 5 "$URL/metrics" | awk -v n="$1" '$1 == n { print $2 + 0 }' # 4e+01 -> 40
}
health() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health"; }

CHAT=/v1/chat/completions
HI='{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}'
# chat NAME JSON [CURL_ARGS...]: a request in the foreground; $T/NAME.{code,body,head,rc}
chat() {
    local name=$1 json=$2
    shift 2
    curl -sS --max-time 30 -o "$T/$name.body" -D "$T/$name.head" -w '%{http_code}' \
        -H 'Content-Type: application/json' --data-binary "$json" "$@" "$URL$CHAT" >"$T/$name.code" 2>"$T/$name.err"
    echo $? >"$T/$name.rc"
}
# whole_ok FILE: a chat.completion with a finish_reason
whole_ok() { jq -e '.object == "chat.completion" and (.choices[0].finish_reason | type == "string")' "$1" >/dev/null 2>&1; }
# stream_ok FILE: SSE chunks, one with a finish_reason, then data: [DONE] as the last line
stream_ok() {
    grep -q '^data: {.*"finish_reason":"[a-z_]*"' "$1" && [ "$(grep -v '^$' "$1" | tail -n 1)" = "data: [DONE]" ]
}

# =====================================================================
# 1. A burst of 4 x (parallel + queue) requests.
start_server burst --parallel 2 --queue 2 --no-supervise
N=16
BURST='{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 64, "ignore_eos": true}'
pids=()
t0=$(now)
for i in $(seq $N); do
    chat "b$i" "$BURST" &
    pids+=($!)
done
wait "${pids[@]}"
echo "     $N requests ended after $(elapsed "$t0") s"
n200=0 n429=0 n503=0
for i in $(seq $N); do
    code=$(cat "$T/b$i.code") rc=$(cat "$T/b$i.rc")
    retry=$(tr -d '\r' <"$T/b$i.head" | awk -F': *' 'tolower($1) == "retry-after" { print $2 }')
    case "$rc:$code" in
    0:200)
        if whole_ok "$T/b$i.body"; then n200=$((n200 + 1)); else
            bad "burst request $i" "200 without a whole answer: $(head -c 300 "$T/b$i.body")"; fi ;;
    0:429)
        if [ -n "$retry" ] && jq -e '.error.code == "queue_full"' "$T/b$i.body" >/dev/null 2>&1; then
            n429=$((n429 + 1))
        else
            bad "burst request $i" "429 without Retry-After or code queue_full: $(head -c 300 "$T/b$i.body")"
        fi ;;
    0:503)
        if [ -n "$retry" ]; then n503=$((n503 + 1)); else bad "burst request $i" "503 without Retry-After"; fi ;;
    *)
        bad "burst request $i" "curl status $rc, HTTP status '$code' ($(head -c 200 "$T/b$i.err"))" ;;
    esac
done
echo "     $n200 x 200, $n429 x 429, $n503 x 503"
if [ $((n200 + n429 + n503)) -eq $N ]; then ok "burst: every request ended with 200, 429 or 503"; fi
if [ "$n200" -ge 1 ] && [ "$n429" -ge 1 ]; then ok "burst: at least one 200 and one 429"; else
    bad "burst" "$n200 x 200 and $n429 x 429: wanted at least one of each"; fi
got=$(metric 'lilac_rejections_total{reason="queue_full"}')
if [ "$got" = "$n429" ] && [ "$n429" -ge 1 ]; then ok "burst: lilac_rejections_total{reason=\"queue_full\"} $got"; else
    bad "burst: queue_full rejections" "/metrics says '$got', $n429 requests got 429"; fi
got=$(metric lilac_requests_completed_total)
if [ "$got" = "$n200" ]; then ok "burst: lilac_requests_completed_total $got"; else
    bad "burst: completed requests" "/metrics says '$got', $n200 requests got 200"; fi
if [ "$(health)" = 200 ]; then ok "burst: /health 200 after"; else bad "burst" "/health after: $(health)"; fi
chat after "$HI"
if [ "$(cat "$T/after.code")" = 200 ] && whole_ok "$T/after.body"; then ok "burst: a chat request after: 200"; else
    bad "burst" "a chat request after: $(cat "$T/after.code")"; fi
stop_server "$SPID"

# =====================================================================
# 2. The supervisor restarts a killed engine.
start_server sup --parallel 2 --queue 2 --grace 150
SUP=$SPID
child=$(sed -n 's/.*"event":"child_ready","pid":\([0-9][0-9]*\).*/\1/p' "$T/sup.log" | tail -n 1)
if [ -z "$child" ]; then
    bad "supervisor" "no child_ready line with a pid"
    sed 's/^/     log: /' "$T/sup.log"
    exit 1
fi
LONG_STREAM='{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000, "ignore_eos": true, "stream": true}'
chat killed "$LONG_STREAM" -N &
cpid=$!
CURLS+=("$cpid")
for i in $(seq 100); do
    grep -q '^data: {' "$T/killed.body" 2>/dev/null && break
    sleep 0.05
done
kill -KILL "$child"
t_kill=$(now)
saw503=0 retry503=0 up=""
for i in $(seq 200); do
    code=$(curl -s -D "$T/h.head" -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health")
    if [ "$code" = 503 ]; then
        saw503=1
        grep -qi '^retry-after: [0-9]' "$T/h.head" && retry503=1
    elif [ "$code" = 200 ]; then
        up=$(elapsed "$t_kill")
        break
    fi
    sleep 0.05
done
wait "$cpid"
rc=$(cat "$T/killed.rc")
if [ "$rc" != 0 ] || ! grep -q '^data: \[DONE\]' "$T/killed.body"; then
    ok "the stream of the killed engine broke (curl status $rc, $(grep -c '^data: {' "$T/killed.body") chunks)"
else
    bad "the stream of the killed engine" "it ended normally"
fi
if kill -0 "$SUP" 2>/dev/null; then ok "the supervisor is still running"; else bad "supervisor" "it is gone"; fi
if [ "$saw503" = 1 ] && [ "$retry503" = 1 ]; then ok "/health 503 with Retry-After while restarting"; else
    bad "/health while restarting" "503 seen: $saw503, with Retry-After: $retry503"; fi
if [ -n "$up" ]; then ok "/health 200 again $up s after the SIGKILL"; else
    bad "/health after the SIGKILL" "not 200 within 10 s"; fi
if grep -q "\"event\":\"child_exited\",\"pid\":$child,.*\"signal\":\"SIGKILL\"" "$T/sup.log"; then
    ok "the log says child $child exited by SIGKILL"
else
    bad "the log" "no child_exited line for pid $child with \"signal\":\"SIGKILL\""
    sed 's/^/     log: /' "$T/sup.log" | grep -v '"event":"request"' | head -n 20
fi
child2=$(sed -n 's/.*"event":"child_ready","pid":\([0-9][0-9]*\).*/\1/p' "$T/sup.log" | tail -n 1)
if [ -n "$child2" ] && [ "$child2" != "$child" ]; then ok "a new engine is ready (pid $child2)"; else
    bad "restart" "no new child_ready line"; fi
chat new "$HI"
if [ "$(cat "$T/new.code")" = 200 ] && whole_ok "$T/new.body"; then ok "a request after the restart: 200"; else
    bad "a request after the restart" "HTTP status $(cat "$T/new.code")"; fi

# =====================================================================
# 3. SIGTERM drains: running and queued requests finish, then exit 0.
MID='{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 600, "ignore_eos": true'
chat d1 "$MID}" --max-time 240 & # (curl takes the last --max-time: room for a sanitizer build)
d1=$!
chat d2 "$MID, \"stream\": true}" -N --max-time 240 &
d2=$!
CURLS+=("$d1" "$d2")
for i in $(seq 400); do
    [ "$(metric lilac_busy_slots)" = 2 ] && grep -q '^data: {' "$T/d2.body" 2>/dev/null && break
    sleep 0.05
done
chat d3 "$MID, \"stream\": true}" -N --max-time 240 & # waits for a slot, so it is the last to finish
d3=$!
CURLS+=("$d3")
for i in $(seq 400); do
    [ "$(metric lilac_queue_depth)" = 1 ] && break
    sleep 0.05
done
echo "     before SIGTERM: lilac_busy_slots $(metric lilac_busy_slots), lilac_queue_depth $(metric lilac_queue_depth)"
t_term=$(now)
kill -TERM "$SUP"
sleep 0.3
code=$(health)
if [ "$code" = 503 ]; then ok "/health 503 while draining"; else bad "/health while draining" "$code"; fi
chat late "$HI"
if [ "$(cat "$T/late.code")" = 503 ] && jq -e '.error.code == "server_draining"' "$T/late.body" >/dev/null 2>&1 &&
    grep -qi '^retry-after: [0-9]' "$T/late.head"; then
    ok "a new request while draining: 503 server_draining with Retry-After"
else
    bad "a new request while draining" "HTTP status $(cat "$T/late.code"): $(head -c 200 "$T/late.body")"
fi
exited=""
for i in $(seq 1600); do # the grace, 150 s, and a little more
    if ! kill -0 "$SUP" 2>/dev/null; then
        exited=$(elapsed "$t_term")
        break
    fi
    sleep 0.1
done
if [ -n "$exited" ]; then
    wait "$SUP"
    src=$?
    if [ "$src" = 0 ]; then ok "the supervisor exited 0, $exited s after SIGTERM"; else
        bad "the supervisor after SIGTERM" "exit status $src after $exited s"; fi
else
    bad "the supervisor after SIGTERM" "still running 160 s later (--grace 150)"
fi
wait "$d1" "$d2" "$d3"
if [ "$(cat "$T/d1.rc")" = 0 ] && [ "$(cat "$T/d1.code")" = 200 ] && whole_ok "$T/d1.body" &&
    [ "$(jq .usage.completion_tokens "$T/d1.body")" = 600 ]; then
    ok "request running at SIGTERM: 200, all 600 tokens"
else
    bad "request running at SIGTERM" "curl status $(cat "$T/d1.rc"), HTTP $(cat "$T/d1.code"): $(head -c 200 "$T/d1.body")"
fi
for d in d2 d3; do
    what="stream running at SIGTERM"
    [ $d = d3 ] && what="stream waiting at SIGTERM (the last to finish)"
    if [ "$(cat "$T/$d.rc")" = 0 ] && [ "$(cat "$T/$d.code")" = 200 ] && stream_ok "$T/$d.body"; then
        ok "$what: whole, ends with data: [DONE]"
    else
        bad "$what" "curl status $(cat "$T/$d.rc"), HTTP $(cat "$T/$d.code"), $(grep -c '^data: {' "$T/$d.body") chunks, last: $(grep -v '^$' "$T/$d.body" | tail -n 1 | head -c 160)"
    fi
done
if grep -q '"event":"stopped".*"killed":false' "$T/sup.log"; then ok "the log says stopped, killed false"; else
    bad "the log" "no stopped line with \"killed\":false"; fi
if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health")" = 000 ]; then
    ok "nothing listens on the port after the exit"
else
    bad "after the exit" "something still answers on $URL"
fi

# =====================================================================
# 4. A stream that ends just as the drain ends: its last chunks and
#    [DONE] must still reach the client before the engine exits. The
#    engine drains as soon as the request is generated, so this races the
#    stream's connection thread: eight rounds of one stream.
END='{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 400, "ignore_eos": true, "stream": true}'
n_cut=0
for round in 1 2 3 4 5 6 7 8; do
    start_server "drain$round" --parallel 2 --grace 60
    chat "e$round" "$END" -N &
    e=$!
    CURLS+=("$e")
    for i in $(seq 100); do
        grep -q '^data: {' "$T/e$round.body" 2>/dev/null && break
        sleep 0.02
    done
    sleep 0.25
    kill -TERM "$SPID"
    wait "$SPID"
    src=$?
    wait "$e"
    if [ "$(cat "$T/e$round.rc")" = 0 ] && [ "$(cat "$T/e$round.code")" = 200 ] && stream_ok "$T/e$round.body"; then
        ok "drain round $round: the stream is whole, ends with data: [DONE]"
    else
        n_cut=$((n_cut + 1))
        bad "drain round $round" "curl status $(cat "$T/e$round.rc") (18: the connection closed before the end), HTTP $(cat "$T/e$round.code"), last: $(grep -v '^$' "$T/e$round.body" | tail -n 1 | head -c 120)"
    fi
    if [ "$src" != 0 ]; then bad "drain round $round" "the supervisor exited $src"; fi
done
[ "$n_cut" -gt 0 ] && echo "     $n_cut of 8 streams were cut off at the drain"

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    exit 1
fi
exit 0
