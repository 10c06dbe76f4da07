#!/usr/bin/env bash
# cli_serve_errors: `lilac serve` on bad requests. Every bad input gets a
# precise 4xx in OpenAI's error shape, {"error":{"message","type","param",
# "code"}} and nothing else: the status, error.type, error.code and (where
# it names a field) error.param are checked. Covered: malformed JSON, wrong
# types, missing and empty fields, unknown roles, invalid UTF-8, a body over
# 16 MiB (413), a prompt over --ctx (or with max_tokens over it),
# out-of-range sampling values, unknown paths and models (404), wrong
# methods (405, with an Allow header), the API key (401
# missing or wrong, 200 right). Then clients that leave: a stream, a whole
# answer and a queued request cut off by curl --max-time must free their
# slot and queue place (lilac_busy_slots 0, lilac_queue_depth 0 within 2 s).
# After all that the servers still answer /health and a chat request with
# 200, /metrics counts the refusals exactly, and every line the server
# logged on stderr is a JSON object.
#
#   bash tests/cli_serve_errors.sh LILAC_BINARY SOURCE_DIR
set -u

NAME=cli_serve_errors
BAD_BODY=1
# shellcheck source=tests/serve_lib.sh
. "$(dirname "$0")/serve_lib.sh" "$@"

AUTH=()
# call METHOD PATH [CURL_ARGS...]: sets CODE (the HTTP status); the body is
# in $T/body, the response head in $T/head. AUTH is added to the headers.
call() {
    local method=$1 path=$2
    shift 2
    CODE=$(curl -sS --max-time 30 -X "$method" -o "$T/body" -D "$T/head" -w '%{http_code}' \
        "${AUTH[@]}" "$@" "$URL$path" 2>"$T/curl.err") || CODE="curl failed ($(head -c 200 "$T/curl.err"))"
}
# post PATH JSON [CURL_ARGS...]
post() {
    local path=$1 json=$2
    shift 2
    call POST "$path" -H 'Content-Type: application/json' --data-binary "$json" "$@"
}
# post_file PATH FILE [CURL_ARGS...]: the body is the file's bytes
post_file() {
    local path=$1 file=$2
    shift 2
    call POST "$path" -H 'Content-Type: application/json' --data-binary "@$file" "$@"
}

n_bad=0  # refusals the server counts as bad_request (4xx but 401)
n_auth=0 # 401s
# expect_error LABEL STATUS TYPE CODE PARAM: the last response is STATUS with
# exactly OpenAI's error object; PARAM "null" wants JSON null, "-" is not checked.
expect_error() {
    local label=$1 status=$2 type=$3 code=$4 param=$5
    if [ "$status" = 401 ]; then n_auth=$((n_auth + 1)); else n_bad=$((n_bad + 1)); fi
    if [ "$CODE" != "$status" ]; then
        bad "$label" "HTTP status $CODE, expected $status"
        return 1
    fi
    if ! grep -qi '^content-type: application/json' "$T/head"; then
        bad "$label" "Content-Type is not application/json"
        return 1
    fi
    local pf='true'
    if [ "$param" = null ]; then pf='.param == null'; elif [ "$param" != - ]; then pf='.param == $p'; fi
    if ! jq -e --arg t "$type" --arg c "$code" --arg p "$param" \
        "(keys == [\"error\"]) and (.error | (keys == [\"code\", \"message\", \"param\", \"type\"]) and
         (.message | type == \"string\" and length > 0) and .type == \$t and .code == \$c and $pf)" \
        "$T/body" >/dev/null 2>&1; then
        bad "$label" "not the error {type: $type, code: $code, param: $param}"
        return 1
    fi
    case $param in null | -) ok "$label: $status $code" ;; *) ok "$label: $status $code ($param)" ;; esac
}

# expect_200 LABEL: the last response is 200 with a whole answer
expect_200() {
    if [ "$CODE" != 200 ]; then
        bad "$1" "HTTP status $CODE, expected 200"
    elif ! jq -e '.choices[0].finish_reason | type == "string"' "$T/body" >/dev/null 2>&1; then
        bad "$1" "200 but no choices[0].finish_reason"
    else
        ok "$1: 200"
    fi
}

# metric NAME_WITH_LABELS: its value in /metrics (empty when absent)
metric() {
    curl -s --max-time 5 "$URL/metrics" | awk -v n="$1" '$1 == n { print $2 + 0 }' # 4e+01 -> 40
}
# wait_metric NAME WANT SECONDS: poll until the metric equals WANT; 0 if it did
wait_metric() {
    local v
    for _ in $(seq $(($3 * 10))); do
        v=$(metric "$1")
        [ "$v" = "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

# every stderr line of a server is one JSON object
log_is_json() {
    local name=$1 n_lines n_other
    : >"$T/body"
    n_lines=$(wc -l <"$T/$name.log")
    jq -Rr 'select(([fromjson? | objects] | length) == 0)' "$T/$name.log" >"$T/not-json" 2>&1
    n_other=$(wc -l <"$T/not-json")
    if [ "$n_other" -eq 0 ] && [ "$n_lines" -gt 0 ]; then
        ok "server $name: all $n_lines log lines are JSON objects"
    else
        bad "server $name: log lines that are not JSON objects" "$n_other of $n_lines"
        head -n 5 "$T/not-json" | sed 's/^/     line: /'
    fi
}

HI='{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}'
chat_with() { # the "hi" request with more fields: chat_with '"temperature": 3'
    printf '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, %s}' "$1"
}
CHAT=/v1/chat/completions
COMPL=/v1/completions

# =====================================================================
# Server A: a 64-token context and an API key.
KEY=test-key-0123456789
start_server a --ctx 64 --parallel 2 --api-key "$KEY" --no-supervise
AUTH=(-H "Authorization: Bearer $KEY")

# ---- not JSON, or not the right JSON ----
post $CHAT '{"messages": ['
expect_error "malformed JSON" 400 invalid_request_error invalid_json null
post $CHAT ''
expect_error "empty body" 400 invalid_request_error invalid_json null
post $CHAT "$HI x"
expect_error "bytes after the JSON" 400 invalid_request_error invalid_json null
post $CHAT '{"messages": [{"role": "user", "content": "hi"}], "temperature": 1, "temperature": 2}'
expect_error "duplicate key" 400 invalid_request_error invalid_json null
post $CHAT '[1, 2]'
expect_error "body is an array" 400 invalid_request_error invalid_type null

# ---- wrong types ----
post $CHAT "$(chat_with '"temperature": "hot"')"
expect_error "temperature \"hot\"" 400 invalid_request_error invalid_type temperature
post $CHAT "$(chat_with '"stream": "yes"')"
expect_error "stream \"yes\"" 400 invalid_request_error invalid_type stream
post $CHAT '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1.5}'
expect_error "max_tokens 1.5" 400 invalid_request_error invalid_type max_tokens
post $CHAT '{"messages": "hi"}'
expect_error "messages a string" 400 invalid_request_error invalid_type messages

# ---- missing and empty ----
post $CHAT '{}'
expect_error "no messages" 400 invalid_request_error missing_required_parameter messages
post $CHAT '{"model": "x", "max_tokens": 4}'
expect_error "no messages, other fields" 400 invalid_request_error missing_required_parameter messages
post $CHAT '{"messages": []}'
expect_error "empty messages" 400 invalid_request_error empty_array messages
post $CHAT '{"messages": [{"role": "user"}]}'
expect_error "message without content" 400 invalid_request_error missing_required_parameter "messages[0].content"
post $COMPL '{"max_tokens": 4}'
expect_error "completion without prompt" 400 invalid_request_error missing_required_parameter prompt

# ---- values ----
post $CHAT '{"messages": [{"role": "wizard", "content": "hi"}]}'
expect_error "unknown role" 400 invalid_request_error invalid_value "messages[0].role"
post $CHAT "$(chat_with '"temperature": 3')"
expect_error "temperature 3" 400 invalid_request_error invalid_value temperature
post $CHAT "$(chat_with '"temperature": -0.5')"
expect_error "temperature -0.5" 400 invalid_request_error invalid_value temperature
post $CHAT "$(chat_with '"top_p": 1.5')"
expect_error "top_p 1.5" 400 invalid_request_error invalid_value top_p
post $CHAT "$(chat_with '"logprobs": true, "top_logprobs": 50')"
expect_error "top_logprobs 50" 400 invalid_request_error invalid_value top_logprobs
post $CHAT '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}'
expect_error "max_tokens 0" 400 invalid_request_error invalid_value max_tokens
post $CHAT "$(chat_with '"n": 2')"
expect_error "n 2" 400 invalid_request_error unsupported_value n
post $CHAT "$(chat_with '"stop": ["a", "b", "c", "d", "e"]')"
expect_error "five stop strings" 400 invalid_request_error array_above_max_length stop
post $COMPL '{"prompt": "hi", "logprobs": 9}'
expect_error "completion logprobs 9" 400 invalid_request_error invalid_value logprobs
post $COMPL '{"prompt": [1, 2, 99999999]}'
expect_error "token id outside the vocabulary" 400 invalid_request_error invalid_value prompt

# ---- bytes that are not UTF-8 ----
printf '{"messages": [{"role": "user", "content": "h\377\376i"}]}' >"$T/ff.json"
post_file $CHAT "$T/ff.json"
expect_error "bytes FF FE" 400 invalid_request_error invalid_encoding null
printf '{"messages": [{"role": "user", "content": "\300\257"}]}' >"$T/overlong.json"
post_file $CHAT "$T/overlong.json"
expect_error "overlong C0 AF" 400 invalid_request_error invalid_encoding null
printf '{"messages": [{"role": "user", "content": "\355\240\200"}]}' >"$T/surrogate.json"
post_file $CHAT "$T/surrogate.json"
expect_error "raw surrogate ED A0 80" 400 invalid_request_error invalid_encoding null
printf '{"messages": [{"role": "user", "content": "ab\342\202"}]}' >"$T/cut.json"
post_file $CHAT "$T/cut.json"
expect_error "character cut short" 400 invalid_request_error invalid_encoding null

# ---- a prompt over the context (--ctx 64) ----
long=$(printf 'hello world %.0s' $(seq 100))
post $CHAT "{\"messages\": [{\"role\": \"user\", \"content\": \"$long\"}]}"
expect_error "chat prompt over --ctx 64" 400 invalid_request_error context_length_exceeded messages
post $COMPL "{\"prompt\": \"$long\"}"
expect_error "completion prompt over --ctx 64" 400 invalid_request_error context_length_exceeded prompt
post $COMPL "{\"prompt\": [$(seq -s, 1 64)]}"
expect_error "completion of exactly 64 tokens" 400 invalid_request_error context_length_exceeded prompt
post $COMPL "{\"prompt\": [$(seq -s, 1 63)], \"max_tokens\": 2}"
expect_error "completion of 63 tokens and max_tokens 2 in 64" 400 invalid_request_error context_length_exceeded max_tokens
post $COMPL "{\"prompt\": [$(seq -s, 1 63)], \"max_tokens\": 1}"
expect_200 "completion of 63 tokens and max_tokens 1 in a 64-token context"
post $COMPL "{\"prompt\": [$(seq -s, 1 63)]}"
expect_200 "completion of 63 tokens in a 64-token context, no max_tokens"

# ---- paths and methods ----
call GET /v1/nope
expect_error "GET /v1/nope" 404 invalid_request_error unknown_url null
call POST /v2/chat/completions -H 'Content-Type: application/json' --data-binary "$HI"
expect_error "POST /v2/chat/completions" 404 invalid_request_error unknown_url null
call GET /v1/models/no-such-model
expect_error "GET /v1/models/no-such-model" 404 invalid_request_error model_not_found model
MODEL_ID=$(basename "$MODEL")
call GET "/v1/models/$MODEL_ID"
if [ "$CODE" = 200 ] && jq -e --arg id "$MODEL_ID" '.id == $id and .object == "model"' "$T/body" >/dev/null 2>&1; then
    ok "GET /v1/models/$MODEL_ID: 200"
else
    bad "GET /v1/models/$MODEL_ID" "HTTP status $CODE"
fi
no_allow=()
for mp in "GET $CHAT" "DELETE $CHAT" "PUT $COMPL" "POST /v1/models" "DELETE /v1/models/$MODEL_ID" "POST /health" \
    "DELETE /metrics"; do
    set -- $mp
    call "$1" "$2"
    expect_error "$1 $2" 405 invalid_request_error method_not_allowed null &&
        ! grep -qi '^allow: ' "$T/head" && no_allow+=("$1 $2")
done
: >"$T/body"
if [ ${#no_allow[@]} -eq 0 ]; then
    ok "every 405 names the allowed methods in an Allow header"
else
    bad "405 without an Allow header (RFC 9110 15.5.6: the server MUST send one)" "${no_allow[*]}"
fi

# ---- the API key ----
AUTH=()
post $CHAT "$HI"
expect_error "no Authorization header" 401 invalid_request_error invalid_api_key null
AUTH=(-H "Authorization: Bearer wrong-key")
post $CHAT "$HI"
expect_error "wrong key" 401 invalid_request_error invalid_api_key null
AUTH=(-H "Authorization: Bearer ${KEY}x")
call GET /v1/models
expect_error "key with a byte more, /v1/models" 401 invalid_request_error invalid_api_key null
AUTH=(-H "Authorization: Basic $KEY")
post $CHAT "$HI"
expect_error "the key under another scheme" 401 invalid_request_error invalid_api_key null
AUTH=()
post $CHAT '{"messages": ['
expect_error "malformed JSON without a key: 401 first" 401 invalid_request_error invalid_api_key null
AUTH=(-H "Authorization: bearer   $KEY  ")
call GET /v1/models
if [ "$CODE" = 200 ] && jq -e '.data[0].id | type == "string"' "$T/body" >/dev/null 2>&1; then
    ok "right key (scheme in lower case, spaces around): /v1/models 200"
else
    bad "right key: /v1/models" "HTTP status $CODE"
fi
AUTH=(-H "Authorization: Bearer $KEY")
post $CHAT "$HI"
expect_200 "right key: chat"
AUTH=()
call GET /health
if [ "$CODE" = 200 ]; then ok "/health needs no key: 200"; else bad "/health without a key" "HTTP status $CODE"; fi

# ---- still up; the refusals counted ----
AUTH=(-H "Authorization: Bearer $KEY")
call GET /health
if [ "$CODE" = 200 ]; then ok "server a after all that: /health 200"; else bad "server a /health" "HTTP status $CODE"; fi
post $CHAT "$HI"
expect_200 "server a after all that: chat"
post $COMPL '{"prompt": "Once upon a time", "max_tokens": 8}'
expect_200 "server a after all that: completion"
got=$(metric 'lilac_rejections_total{reason="bad_request"}')
if [ "$got" = "$n_bad" ]; then ok "server a: bad_request refusals counted: $got"; else
    bad "server a: bad_request refusals" "/metrics says '$got', the test made $n_bad"; fi
got=$(metric 'lilac_rejections_total{reason="unauthorized"}')
if [ "$got" = "$n_auth" ]; then ok "server a: unauthorized refusals counted: $got"; else
    bad "server a: unauthorized refusals" "/metrics says '$got', the test made $n_auth"; fi

# =====================================================================
# Server B: the defaults (16 MiB body limit, 4096-token context), two slots.
n_bad=0
n_auth=0
AUTH=()
start_server b --parallel 2 --no-supervise

# ---- a body over the 16 MiB limit: refused from Content-Length, or while read ----
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$T/big.json"
post_file $CHAT "$T/big.json"
expect_error "body of 16 MiB + 1 byte" 413 invalid_request_error request_too_large null
post_file $CHAT "$T/big.json" -H 'Transfer-Encoding: chunked'
expect_error "body of 16 MiB + 1 byte, chunked" 413 invalid_request_error request_too_large null
rm -f "$T/big.json"
post $CHAT "$HI"
expect_200 "after the 413s: chat"

# ---- clients that leave ----
LONG_STREAM='{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000, "ignore_eos": true, "stream": true}'
LONG_WHOLE='{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000, "ignore_eos": true}'

# left_then_idle LABEL: after a client left, no slot is busy and no request waits within 2 s
left_then_idle() {
    if wait_metric lilac_busy_slots 0 2 && wait_metric lilac_queue_depth 0 1; then
        ok "$1: lilac_busy_slots 0 and lilac_queue_depth 0 within 2 s"
    else
        bad "$1" "lilac_busy_slots $(metric lilac_busy_slots), lilac_queue_depth $(metric lilac_queue_depth) 2 s later"
    fi
}

# The client leaves once its first chunk came (up to 10 s: a loaded machine may take over a fixed 0.3 s to send
# one, which made this check flaky), long before the 3000 tokens end.
curl -sS -N -H 'Content-Type: application/json' --data-binary "$LONG_STREAM" "$URL$CHAT" >"$T/cut-stream" 2>/dev/null &
cut_pid=$!
for _ in $(seq 100); do
    grep -q '^data: {' "$T/cut-stream" 2>/dev/null && break
    sleep 0.1
done
kill "$cut_pid" 2>/dev/null
wait "$cut_pid"
rc=$?
n_chunks=$(grep -c '^data: {' "$T/cut-stream")
if [ "$rc" != 0 ] && [ "$n_chunks" -gt 0 ] && ! grep -q '^data: \[DONE\]' "$T/cut-stream"; then
    ok "stream cut off by the client after $n_chunks chunks"
else
    bad "stream cut off by the client" "curl status $rc (killed wanted), $n_chunks chunks"
fi
left_then_idle "client left mid-stream"

curl -sS --max-time 0.3 -H 'Content-Type: application/json' --data-binary "$LONG_WHOLE" \
    "$URL$CHAT" >/dev/null 2>&1
rc=$?
if [ "$rc" = 28 ]; then ok "whole answer: the client left after 0.3 s"; else
    bad "whole answer cut off by the client" "curl status $rc, 28 wanted"; fi
left_then_idle "client left while its whole answer was made"

# both slots busy for ~1.5 s, a third request waits in the queue and leaves
bg=()
for _ in 1 2; do
    curl -sS -N --max-time 1.5 -H 'Content-Type: application/json' --data-binary "$LONG_STREAM" \
        "$URL$CHAT" >/dev/null 2>&1 &
    bg+=($!)
done
sleep 0.2
curl -sS --max-time 0.4 -H 'Content-Type: application/json' --data-binary "$LONG_WHOLE" "$URL$CHAT" >/dev/null 2>&1 &
queued=$!
if wait_metric lilac_queue_depth 1 1; then queued_seen=yes; else queued_seen=no; fi
wait "$queued"
if [ "$queued_seen" = no ]; then
    bad "a third request with both slots busy" "lilac_queue_depth never 1 (busy slots: $(metric lilac_busy_slots))"
elif wait_metric lilac_queue_depth 0 1; then
    ok "client left the queue: lilac_queue_depth 1, then 0 within 1 s"
else
    bad "client left the queue" "lilac_queue_depth $(metric lilac_queue_depth) 1 s later"
fi
wait "${bg[@]}"
left_then_idle "two streams and a queued request left"

n_499=$(grep -c '"event":"request".*"status":499' "$T/b.log")
if [ "$n_499" -ge 5 ]; then ok "server b logged the $n_499 clients that left (status 499)"; else
    bad "server b's log" "$n_499 request lines with status 499, expected 5"; fi

# ---- still up ----
call GET /health
if [ "$CODE" = 200 ]; then ok "server b after all that: /health 200"; else bad "server b /health" "HTTP status $CODE"; fi
post $CHAT "$HI"
expect_200 "server b after all that: chat"
got=$(metric 'lilac_rejections_total{reason="bad_request"}')
if [ "$got" = "$n_bad" ]; then ok "server b: bad_request refusals counted: $got"; else
    bad "server b: bad_request refusals" "/metrics says '$got', the test made $n_bad"; fi

# ---- logs ----
for p in "${SERVERS[@]}"; do stop_server "$p"; done
log_is_json a
log_is_json b

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    exit 1
fi
exit 0
