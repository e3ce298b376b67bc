#!/usr/bin/env bash
# A fleet's migration from the classic lock to modern relock, end to end,
# on a private redis-server behind the old-server proxy (docs/migration.md):
#
#   1. legacy:  an old server (personality 2.4) and classic clients; relock
#               in legacy mode shares their keys.
#   2. bridge:  the server is upgraded (personality 7); relock in bridge
#               mode writes values legacy clients still read, with a TTL;
#               relock scan sees the legacy writer and says: stay.
#   3. modern:  the last legacy client is gone; once the marker is older
#               than the quiet window, scan says modern is safe, and
#               migration.legacy_clients = false makes auto pick modern.
#
#   migration-walkthrough.sh [BUILD_DIR]      (default: build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
RELOCK=$BUILD/relock
PROXY=$BUILD/tests/support/proxy/relock-compat-proxy
[ -x "$RELOCK" ] && [ -x "$PROXY" ] || { echo "build first: cmake --build $BUILD" >&2; exit 2; }

DIR=$(mktemp -d /tmp/relock-walk-XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
step() { printf '\n== %s\n' "$*"; }

PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
    --daemonize no --logfile "$DIR/server.log" &
PIDS+=($!)
for _ in $(seq 1 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done

proxy() { # proxy PERSONALITY -> sets PPORT
    "$PROXY" --upstream "127.0.0.1:$PORT" --personality "$1" >"$DIR/proxy.out" &
    PIDS+=($!)
    for _ in $(seq 1 100); do [ -s "$DIR/proxy.out" ] && break; sleep 0.05; done
    PPORT=$(awk '{print $2}' "$DIR/proxy.out")
}
classic_acquire() { # the classic SETNX pattern, as an unchanged legacy client does it
    local exp=$(( $(date +%s) + 10 + 1 ))
    redis-cli -p "$1" SETNX "$2" "$exp"
}

step "1. legacy: Redis 2.4 (emulated), a classic client holds job-a"
proxy 2.4
cat >"$DIR/legacy.conf" <<CONF
relock = { mode = "legacy"; servers = ( { host = "127.0.0.1"; port = $PPORT; } ); };
CONF
echo "classic SETNX job-a: $(classic_acquire "$PPORT" job-a)"
echo "relock (legacy) tries job-a:"
"$RELOCK" -c "$DIR/legacy.conf" acquire -n job-a || echo "  -> exit $? (held by the classic client, as it must be)"
read -r V F _ < <("$RELOCK" -c "$DIR/legacy.conf" acquire -t 5s job-b)
echo "relock (legacy) holds job-b: value $V fence $F"
"$RELOCK" -c "$DIR/legacy.conf" inspect job-b
"$RELOCK" -c "$DIR/legacy.conf" release job-b "$V" "$F" && echo "released job-b"

step "2. bridge: the server is upgraded; legacy clients still run"
cat >"$DIR/bridge.conf" <<CONF
relock = { mode = "bridge"; servers = ( { host = "127.0.0.1"; port = $PORT; } ); };
CONF
"$RELOCK" -c "$DIR/bridge.conf" probe
echo "relock (bridge) meets the classic holder of job-a (and records the sighting):"
"$RELOCK" -c "$DIR/bridge.conf" acquire -n job-a || echo "  -> exit $?"
read -r V F _ < <("$RELOCK" -c "$DIR/bridge.conf" acquire -t 5s job-c)
echo "relock (bridge) holds job-c: value $V (a timestamp legacy clients read) with TTL $(redis-cli -p "$PORT" PTTL job-c) ms"
echo "a classic client on job-c: SETNX -> $(classic_acquire "$PORT" job-c) (0: it sees the lock held)"
"$RELOCK" -c "$DIR/bridge.conf" release job-c "$V" "$F" && echo "released job-c"
"$RELOCK" -c "$DIR/bridge.conf" scan

step "3. modern: no legacy writer left, and the quiet window has passed"
redis-cli -p "$PORT" DEL job-a >/dev/null   # the last classic client is retired
# For the walkthrough the quiet window is one second, not a week.
cat >"$DIR/auto.conf" <<CONF
relock = {
  mode = "auto";
  migration = { legacy_clients = true; quiet_window_ms = 1000; };
  servers = ( { host = "127.0.0.1"; port = $PORT; } );
};
CONF
sleep 1.2
"$RELOCK" -c "$DIR/auto.conf" scan
sed -i 's/legacy_clients = true/legacy_clients = false/' "$DIR/auto.conf"
"$RELOCK" -c "$DIR/auto.conf" probe
read -r V F _ < <("$RELOCK" -c "$DIR/auto.conf" acquire -t 5s job-d)
echo "relock (auto -> modern) holds job-d with token $V"
"$RELOCK" -c "$DIR/auto.conf" release job-d "$V" "$F" && echo "released job-d"
echo
echo "walkthrough complete"
