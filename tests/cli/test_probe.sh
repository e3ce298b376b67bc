#!/usr/bin/env bash
# relock probe: the paths modern mode takes on a server (acquire, release,
# extend, scripts) as a line of their own and as the JSON object "paths",
# on the real server and through the compat proxy's newer-server
# personalities, with Lua and without it.
#   test_probe.sh PATH/TO/relock PATH/TO/relock-compat-proxy
RELOCK=${1:?usage: test_probe.sh PATH/TO/relock PATH/TO/relock-compat-proxy}
PROXY=${2:?usage: test_probe.sh PATH/TO/relock PATH/TO/relock-compat-proxy}
. "$(dirname "$0")/lib.sh"
cli_dir probe
start_redis
REAL=$PORT

# The value of key KEY of the "paths" object in DIR/out, or "null" when
# "paths" is null.
paths_field() {
    $PY -c '
import json, sys
p = json.load(open(sys.argv[1]))["paths"]
print("null" if p is None else p[sys.argv[2]])' "$DIR/out" "$1"
}

# probe_case LABEL PORT MODE ACQUIRE RELEASE EXTEND SCRIPTS [SETTING...]
probe_case() {
    local label=$1 port=$2 mode=$3 acq=$4 rel=$5 ext=$6 scr=$7
    shift 7
    local url="redis://127.0.0.1:$port"
    expect 0 "$label: probe" -- "$RELOCK" -u "$url" -m "$mode" "$@" probe || return
    local want="paths:   acquire $acq; release $rel; extend $ext; scripts $scr"
    if [ "$acq" = null ]; then
        grep -q '^paths:' "$DIR/out" && bad "$label: a paths line outside modern mode: $(cat "$DIR/out")" || ok
    else
        grep -qxF "$want" "$DIR/out" && ok || bad "$label: wanted '$want' in: $(cat "$DIR/out")"
    fi
    expect 0 "$label: probe --json" -- "$RELOCK" -u "$url" -m "$mode" "$@" probe --json || return
    if [ "$acq" = null ]; then
        [ "$(paths_field acquire)" = null ] && ok || bad "$label: paths not null: $(cat "$DIR/out")"
        return
    fi
    [ "$(paths_field acquire)" = "$acq" ] && ok || bad "$label: json acquire: $(cat "$DIR/out")"
    [ "$(paths_field release)" = "$rel" ] && ok || bad "$label: json release: $(cat "$DIR/out")"
    [ "$(paths_field extend)" = "$ext" ] && ok || bad "$label: json extend: $(cat "$DIR/out")"
    [ "$(paths_field scripts)" = "$scr" ] && ok || bad "$label: json scripts: $(cat "$DIR/out")"
}

# Each proxy writes a file of its own: with one file for all, the previous
# proxy's port line could be read before the new proxy's shell had
# truncated it (seen on a loaded machine: the probe then met the previous
# personality).
NPROXY=0
start_proxy() { # PERSONALITY [--no-lua]: the proxy's port in PPORT
    NPROXY=$((NPROXY + 1))
    local out="$DIR/proxy-$NPROXY.out"
    "$PROXY" --upstream "127.0.0.1:$REAL" --listen 0 --personality "$@" >"$out" &
    PIDS+=($!)
    wait_for grep -q '^port ' "$out" || bad "proxy $*: no port"
    PPORT=$(awk '/^port /{print $2}' "$out")
}

SCRIPT="script (SET NX PX, INCR)"
WATCHED="WATCH/MULTI (SET PX, INCR)"
NOLUA="none (the server runs without Lua)"

# The real server: scripts everywhere (unless it has the native commands).
if redis-cli -p "$REAL" COMMAND DOCS DELIFEQ DELEX 2>/dev/null | grep -qi 'delifeq\|delex'; then
    echo "SKIPPED: the real server has native commands; its paths are checked by it_native"
else
    probe_case "real server" "$REAL" modern "$SCRIPT" script script used
    echo 'relock = { fencing = false; };' >"$DIR/unfenced.conf"
    probe_case "real server, fencing off" "$REAL" modern "SET NX PX" script script used \
        -c "$DIR/unfenced.conf"
fi
probe_case "real server, legacy" "$REAL" legacy null null null null

start_proxy 7 --no-lua
probe_case "7 without Lua" "$PPORT" modern "$WATCHED" WATCH/MULTI WATCH/MULTI "$NOLUA"
start_proxy valkey-8.1
probe_case "valkey-8.1" "$PPORT" modern "$SCRIPT" script "SET IFEQ PX" used
start_proxy valkey-8.1 --no-lua
probe_case "valkey-8.1 without Lua" "$PPORT" modern "$WATCHED" WATCH/MULTI "SET IFEQ PX" "$NOLUA"
start_proxy valkey-9.0
probe_case "valkey-9.0" "$PPORT" modern "$SCRIPT" DELIFEQ "SET IFEQ PX" used
start_proxy valkey-9.0 --no-lua
probe_case "valkey-9.0 without Lua" "$PPORT" modern "$WATCHED" DELIFEQ "SET IFEQ PX" "$NOLUA"
probe_case "valkey-9.0 without Lua, legacy" "$PPORT" legacy null null null null
start_proxy redis-8.4
probe_case "redis-8.4" "$PPORT" modern "$SCRIPT" "DELEX IFEQ" "SET IFEQ PX" used
start_proxy redis-8.4 --no-lua
probe_case "redis-8.4 without Lua" "$PPORT" modern "$WATCHED" "DELEX IFEQ" "SET IFEQ PX" "$NOLUA"

finish cli_probe
