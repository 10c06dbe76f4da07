#!/usr/bin/env bash
# cli_serve_cache: `lilac serve` reuses the prompt state of a conversation.
# Turn 1: a system prompt and a user message of ~200 tokens. Turn 2: the
# same messages, the assistant's reply from turn 1 and a new user message.
# Turn 2's usage.prompt_tokens_details.cached_tokens must cover turn 1's
# prompt (>= its token count minus a few, < turn 2's count), also when
# streamed (stream_options.include_usage), and the server's request log
# line for turn 2 must say the same cached_tokens. A different conversation
# must not claim the cache; a completion prompt extended by a few words
# reuses its first part; /metrics' lilac_cached_prompt_tokens_total is the
# sum of what the responses said. With temperature 0, turn 2's answer from
# the cache equals turn 2's answer on a fresh server (no cache). Both
# turns' ttft_s from the log are printed, not compared: on the tiny test
# model both are milliseconds.
#
#   bash tests/cli_serve_cache.sh LILAC_BINARY SOURCE_DIR
set -u

NAME=cli_serve_cache
# shellcheck source=tests/serve_lib.sh
. "$(dirname "$0")/serve_lib.sh" "$@"

# send PATH REQ_FILE RESP_FILE: POST; exits the test when it is not a 200
send() {
    local code
    code=$(curl -sS --max-time 30 -o "$3" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "@$2" "$URL$1")
    if [ "$code" != 200 ]; then
        bad "POST $1 ($(basename "$2"))" "HTTP status $code: $(head -c 300 "$3")"
        echo "$pass passed, $fail failed"
        exit 1
    fi
}
usage_of() { jq -r "$2" "$1"; } # FILE JQ_PATH
# log_of ID FIELD: FIELD of the server's request log line for response ID
log_of() {
    jq -Rr --arg id "$1" "fromjson? | objects | select(.event == \"request\" and .id == \$id) | .$2" "$T/cache.log" |
        head -n 1
}

start_server cache --parallel 2 --no-supervise

# ---- turn 1: a system prompt and ~200 tokens of user text ----
para="The quick brown fox jumps over the lazy dog while the river keeps flowing past the old mill, and the miller counts his sacks of grain one by one before the sun goes down behind the hills."
user1="$para Then the lamps are lit in the village, the bells ring twice, and the children run home along the stone wall. $para"
jq -n --arg u "$user1" '{messages: [{role: "system", content: "You are a careful assistant who answers in one short paragraph."},
    {role: "user", content: $u}], max_tokens: 24, temperature: 0}' >"$T/turn1.json"
send /v1/chat/completions "$T/turn1.json" "$T/turn1.out"
P1=$(usage_of "$T/turn1.out" .usage.prompt_tokens)
C1=$(usage_of "$T/turn1.out" .usage.prompt_tokens_details.cached_tokens)
echo "     turn 1: $P1 prompt tokens, $C1 cached"
if [ "$P1" -ge 150 ] && [ "$P1" -le 400 ]; then ok "turn 1 has $P1 prompt tokens (~200 wanted)"; else
    bad "turn 1" "$P1 prompt tokens; the test wants ~200"; fi
if [ "$C1" = 0 ]; then ok "turn 1 on a fresh server: 0 cached tokens"; else
    bad "turn 1 on a fresh server" "cached_tokens $C1, expected 0"; fi

# ---- turn 2: turn 1, the reply, a new question ----
jq --argjson reply "$(jq '{role: "assistant", content: .choices[0].message.content}' "$T/turn1.out")" \
    '.messages += [$reply, {role: "user", content: "And what happened after the bells rang?"}]' \
    "$T/turn1.json" >"$T/turn2.json"
send /v1/chat/completions "$T/turn2.json" "$T/turn2.out"
P2=$(usage_of "$T/turn2.out" .usage.prompt_tokens)
C2=$(usage_of "$T/turn2.out" .usage.prompt_tokens_details.cached_tokens)
echo "     turn 2: $P2 prompt tokens, $C2 cached"
SLACK=4
if [ "$C2" -gt 0 ] && [ "$C2" -ge $((P1 - SLACK)) ] && [ "$C2" -lt "$P2" ]; then
    ok "turn 2 reuses turn 1's prompt: $C2 of $P2 prompt tokens cached (turn 1 had $P1)"
else
    bad "turn 2's cached_tokens" "$C2 of $P2; expected at least $((P1 - SLACK)) (turn 1's $P1 minus $SLACK) and below $P2"
fi
ID1=$(jq -r .id "$T/turn1.out")
ID2=$(jq -r .id "$T/turn2.out")
L2=$(log_of "$ID2" cached_tokens)
if [ "$L2" = "$C2" ] && [ "$(log_of "$ID2" prompt_tokens)" = "$P2" ]; then
    ok "the log line of turn 2 says cached_tokens $L2"
else
    bad "the log line of turn 2 ($ID2)" "cached_tokens '$L2', prompt_tokens '$(log_of "$ID2" prompt_tokens)'; the response said $C2 of $P2"
fi
echo "     ttft_s: turn 1 $(log_of "$ID1" ttft_s), turn 2 $(log_of "$ID2" ttft_s) (printed, not compared)"

# ---- turn 2 again, streamed, with usage at the end ----
jq '.stream = true | .stream_options = {include_usage: true}' "$T/turn2.json" >"$T/turn2s.json"
send /v1/chat/completions "$T/turn2s.json" "$T/turn2s.out"
C2S=$(sed -n 's/^data: //p' "$T/turn2s.out" | grep -v '^\[DONE\]' |
    jq -r 'select(.usage != null and (.choices | length) == 0) | .usage.prompt_tokens_details.cached_tokens' | tail -n 1)
if [ -n "$C2S" ] && [ "$C2S" -ge $((P1 - SLACK)) ] && [ "$C2S" -lt "$P2" ]; then
    ok "turn 2 streamed: the usage chunk says $C2S cached"
else
    bad "turn 2 streamed" "the usage chunk's cached_tokens is '$C2S'; expected at least $((P1 - SLACK)), below $P2"
fi

# ---- another conversation does not claim the cache ----
jq -n '{messages: [{role: "system", content: "Reply in French."},
    {role: "user", content: "Sailors mend their nets at dawn; gulls circle above the harbour and the tide turns."}],
    max_tokens: 8}' >"$T/other.json"
send /v1/chat/completions "$T/other.json" "$T/other.out"
P3=$(usage_of "$T/other.out" .usage.prompt_tokens)
C3=$(usage_of "$T/other.out" .usage.prompt_tokens_details.cached_tokens)
if [ "$C3" -lt $((P3 / 2)) ]; then ok "another conversation: $C3 of $P3 cached"; else
    bad "another conversation" "$C3 of its $P3 prompt tokens cached: more than a shared template head"; fi

# ---- completions: a prompt, then the same prompt and a few words more ----
jq -n --arg p "$para $para" '{prompt: $p, max_tokens: 8}' >"$T/c1.json"
jq -n --arg p "$para $para And so the evening ends." '{prompt: $p, max_tokens: 8}' >"$T/c2.json"
send /v1/completions "$T/c1.json" "$T/c1.out"
send /v1/completions "$T/c2.json" "$T/c2.out"
PC1=$(usage_of "$T/c1.out" .usage.prompt_tokens)
CC2=$(usage_of "$T/c2.out" .usage.prompt_tokens_details.cached_tokens)
PC2=$(usage_of "$T/c2.out" .usage.prompt_tokens)
if [ "$CC2" -ge $((PC1 - SLACK)) ] && [ "$CC2" -lt "$PC2" ]; then
    ok "completion extended by a few words: $CC2 of $PC2 cached (the first had $PC1)"
else
    bad "completion extended by a few words" "$CC2 of $PC2 cached; expected at least $((PC1 - SLACK))"
fi

# ---- the counter ----
sum=$((C1 + C2 + C2S + C3 + $(usage_of "$T/c1.out" .usage.prompt_tokens_details.cached_tokens) + CC2))
got=$(curl -s --max-time 5 "$URL/metrics" | awk '$1 == "lilac_cached_prompt_tokens_total" { print $2 + 0 }')
if [ "$got" = "$sum" ]; then ok "lilac_cached_prompt_tokens_total $got, the sum of the responses"; else
    bad "lilac_cached_prompt_tokens_total" "'$got', the responses said $sum in all"; fi

# ---- the cache changes nothing in the answer ----
start_server fresh --parallel 2 --no-supervise
send /v1/chat/completions "$T/turn2.json" "$T/turn2-fresh.out"
if [ "$(usage_of "$T/turn2-fresh.out" .usage.prompt_tokens_details.cached_tokens)" = 0 ] &&
    [ "$(jq -c '.choices[0].message' "$T/turn2.out")" = "$(jq -c '.choices[0].message' "$T/turn2-fresh.out")" ]; then
    ok "turn 2 at temperature 0: the same answer from the cache as on a fresh server"
else
    bad "turn 2 at temperature 0, cached vs fresh" "$(jq -c '.choices[0].message.content' "$T/turn2.out") vs $(jq -c '.choices[0].message.content' "$T/turn2-fresh.out")"
fi

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    exit 1
fi
exit 0
