# serve_lib: what the `lilac serve` shell tests share. Source it after
# setting NAME (the test's name) with the script's arguments:
#
#   NAME=cli_serve_x; . "$(dirname "$0")/serve_lib.sh" "$@"
#
# It checks LILAC_BINARY, SOURCE_DIR, curl, jq and the fixture model (exit
# 77 with the reason when a tool or the model is missing), makes the temp
# dir T, and defines ok / bad (counting pass and fail; bad shows $T/body
# when BAD_BODY=1), stop_server PID, start_server NAME ARGS..., and a
# cleanup trap that stops every server (SERVERS) and curl (CURLS) started.

LILAC=${1:?usage: $NAME.sh LILAC_BINARY SOURCE_DIR}
SRC=${2:?usage: $NAME.sh LILAC_BINARY SOURCE_DIR}
if [ ! -x "$LILAC" ]; then
    echo "$NAME: $LILAC is not an executable" >&2
    exit 1
fi
for tool in curl jq; do
    if ! command -v "$tool" >/dev/null; then
        echo "SKIP: $tool not found (scripts/setup.sh installs it)"
        exit 77
    fi
done
FX=${LILAC_FIXTURES:-$SRC/../shared/fixtures}
MODEL=$FX/tiny-qwen35moe/gguf/model-Q4_K_M.gguf
if [ ! -f "$MODEL" ]; then
    echo "SKIP: fixture model not found at $MODEL (set LILAC_FIXTURES or place the fixtures at $SRC/../shared/fixtures)"
    exit 77
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/lilac-$NAME-XXXXXX") || exit 1
SERVERS=()
CURLS=()
stop_server() { # PID: SIGTERM, then SIGKILL after 5 s
    local p=$1
    kill -TERM "$p" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
}
cleanup() {
    local p
    for p in "${CURLS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${SERVERS[@]}"; do stop_server "$p"; done
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
    if [ "${BAD_BODY:-0}" = 1 ] && [ -s "$T/body" ]; then head -c 600 "$T/body" | sed 's/^/     body: /'; echo; fi
}

# start_server NAME ARGS...: lilac serve on a free port, its stderr in
# $T/NAME.log; sets URL and SPID once /health answers 200 (20 s at most).
start_server() {
    local name=$1 port=""
    shift
    "$LILAC" serve -m "$MODEL" --host 127.0.0.1 --port 0 -t 2 "$@" 2>"$T/$name.log" &
    SPID=$!
    SERVERS+=("$SPID")
    for _ in $(seq 200); do
        port=$(sed -n 's/^{"event":"listening".*"port":\([0-9][0-9]*\).*/\1/p' "$T/$name.log" | head -n 1)
        [ -n "$port" ] && break
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.05
    done
    if [ -z "$port" ]; then
        echo "FAIL server $name: no listening line in its log"
        sed 's/^/     log: /' "$T/$name.log" | head -n 20
        exit 1
    fi
    URL=http://127.0.0.1:$port
    for _ in $(seq 200); do
        if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health")" = 200 ]; then
            echo "     server $name: $URL, pid $SPID"
            return 0
        fi
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    echo "FAIL server $name: /health never answered 200"
    sed 's/^/     log: /' "$T/$name.log" | head -n 20
    exit 1
}
