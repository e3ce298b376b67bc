#!/usr/bin/env bash
# The loss deadline of run and hold, measured from events against a real
# redis-server (behind the compat proxy where the path must refuse or err):
#   - a SIGSTOPped server (a partition that drops packets): run's CMD gets
#     SIGTERM, and hold exits 3, no later than the end of the validity relock
#     computed, which ends before the expiry the server set at the last
#     renewal (seen by the test just before it stops the server);
#   - a refused reconnect (the proxy gone for good): the same bound;
#   - the path refused for a moment (the proxy gone, then back on its port):
#     the failed renewal is retried and CMD runs on with the lock held;
#   - a transient error reply (-LOADING) to a renewal: retried, held, and
#     with -v said as it happens;
#   - with -v, a loss says what the key holds now.
#   test_deadline.sh PATH/TO/relock PATH/TO/relock-compat-proxy
set -u
RELOCK=${1:?usage: test_deadline.sh PATH/TO/relock PATH/TO/relock-compat-proxy}
PROXY=${2:?usage: test_deadline.sh PATH/TO/relock PATH/TO/relock-compat-proxy}
. "$(dirname "$0")/lib.sh"
cli_dir deadline
STOPPED=()
cli_cleanup_more() {
    for p in "${STOPPED[@]}"; do kill -CONT "$p" 2>/dev/null; done
    for f in "$DIR"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
}
start_redis
SERVER=${PIDS[0]}
now_ms() { date +%s%3N; }
has() { [ -s "$1" ]; }
rcli() { redis-cli -p "$PORT" "$@"; }
# How late after the end of the validity CMD may get SIGTERM: the time a
# loaded machine takes to wake relock, signal, and run CMD's trap.  Before
# the deadline was relock's own, CMD got it about 1 s after that expiry.
SLACK=700
# renewed KEY: waits (at most 5 s) for a renewal of KEY, seen as a new
# PEXPIRETIME on the server, and prints that expiry (ms since the epoch).
# The validity relock computed at that renewal ends before it, and the next
# renewal is a third of the lease away.
renewed() {
    local e0 e
    e0=$(rcli pexpiretime "$1")
    for _ in $(seq 1 1000); do
        e=$(rcli pexpiretime "$1")
        if [ "$e" != "$e0" ]; then echo "$e"; return 0; fi
    done
    echo 0
    return 1
}

# A CMD that writes its pid, and the time SIGTERM reached it.
term_cmd() {
    echo "trap 'date +%s%3N >$DIR/$1.term; exit 5' TERM; echo \$\$ >$DIR/$1.pid; while :; do sleep 0.05; done"
}

# start_proxy: a proxy in front of the server on PPORT (a fixed port, so
# that a new proxy can take its place), its pid in PROXYPID.
start_proxy() {
    "$PROXY" --upstream "127.0.0.1:$PORT" --listen "$PPORT" >"$DIR/proxy.out" 2>&1 &
    PROXYPID=$!
    PIDS+=("$PROXYPID")
    wait_for grep -q '^port ' "$DIR/proxy.out"
}
PPORT=$(free_port)
MEASURED=""

# --- 1. run, SIGSTOPped server: SIGTERM by the end of the validity
"$RELOCK" -m modern run -t 3s dl-stop -- sh -c "$(term_cmd stop)" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "stop: CMD started" -- wait_for has "$DIR/stop.pid"
expiry=$(renewed dl-stop)
kill -STOP "$SERVER"
STOPPED+=("$SERVER")
code=0
wait "$RUN" || code=$?
kill -CONT "$SERVER"
check "stop: run exits 3 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 3 ]
check "stop: CMD got SIGTERM" -- has "$DIR/stop.term"
late=$(($(cat "$DIR/stop.term" 2>/dev/null || echo 0) - expiry))
MEASURED="$MEASURED stop=$late"
check "stop: SIGTERM $late ms after the server's expiry (at most $SLACK)" -- [ "$late" -le "$SLACK" ]
check "stop: said why ($(cat "$DIR/err"))" -- grep -q '^relock: run: lock lost while CMD was running: ' "$DIR/err"
rm -f "$DIR"/stop.*

# --- 2. hold, SIGSTOPped server: exit 3 by the end of the validity
coproc HS { exec "$RELOCK" -m modern hold -t 3s dl-hold 2>"$DIR/herr"; }
HSP=$HS_PID
PIDS+=("$HSP")
line=''
IFS= read -r -t 10 line <&"${HS[0]}" || bad "hold stop: nothing read"
expiry=$(renewed dl-hold)
kill -STOP "$SERVER"
code=0
wait "$HSP" || code=$?
late=$(($(now_ms) - expiry))
MEASURED="$MEASURED hold=$late"
kill -CONT "$SERVER"
check "hold stop: exit 3 (exit $code: $(cat "$DIR/herr"))" -- [ "$code" -eq 3 ]
check "hold stop: exit $late ms after the server's expiry (at most $SLACK)" -- [ "$late" -le "$SLACK" ]

# --- 3. run through the proxy, the proxy gone for good: connections reset,
# every reconnect refused
start_proxy
export RELOCK_URL="redis://127.0.0.1:$PPORT"
"$RELOCK" -m modern run -t 3s dl-refuse -- sh -c "$(term_cmd refuse)" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "refuse: CMD started" -- wait_for has "$DIR/refuse.pid"
expiry=$(renewed dl-refuse)
kill -KILL "$PROXYPID"
code=0
wait "$RUN" || code=$?
check "refuse: run exits 3 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 3 ]
late=$(($(cat "$DIR/refuse.term" 2>/dev/null || echo 0) - expiry))
MEASURED="$MEASURED refuse=$late"
check "refuse: SIGTERM $late ms after the server's expiry (at most $SLACK)" -- [ "$late" -le "$SLACK" ]
rm -f "$DIR"/refuse.*

# --- 4. the proxy gone for a moment, back on the same port before the
# validity ends: the failed renewal is retried, CMD runs on, holds the lock
start_proxy
"$RELOCK" -m modern run -v -t 6s dl-back -- sh -c "echo \$\$ >$DIR/back.pid; sleep 6" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "back: CMD started" -- wait_for has "$DIR/back.pid"
renewed dl-back >/dev/null # the next renewal, 2 s away, meets the proxy gone
kill -KILL "$PROXYPID"
sleep 2.5
start_proxy
code=0
wait "$RUN" || code=$?
check "back: CMD ran to its end, exit 0 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 0 ]
check "back: no loss said: $(cat "$DIR/err")" -- [ "$(grep -c 'lost' "$DIR/err")" = 0 ]
check "back: a renewal failed and was tried again: $(cat "$DIR/err")" -- \
    grep -q '^relock: run: renewal of dl-back failed' "$DIR/err"
rm -f "$DIR"/back.*

# --- 5. a transient error reply to a renewal: retried, the lock held; -v
# says the failed renewal as it happens
"$RELOCK" -m modern run -v -t 3s dl-error -- sh -c "echo \$\$ >$DIR/error.pid; sleep 4" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "error: CMD started" -- wait_for has "$DIR/error.pid"
redis-cli -p "$PPORT" RELOCK-PROXY FAULT at-reply 1 at-kind error >/dev/null
code=0
wait "$RUN" || code=$?
check "error: CMD ran to its end, exit 0 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 0 ]
check "error: no loss said: $(cat "$DIR/err")" -- [ "$(grep -c 'lost' "$DIR/err")" = 0 ]
check "error: -v said the failed renewal: $(cat "$DIR/err")" -- \
    grep -q '^relock: run: renewal of dl-error failed: .*ms of validity left, trying again' "$DIR/err"

# --- 6. -v on a loss says what the key holds now: another client's value
"$RELOCK" -m modern run -v -t 3s dl-taken -- sh -c "echo \$\$ >$DIR/taken.pid; sleep 20" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "taken: CMD started" -- wait_for has "$DIR/taken.pid"
rcli SET dl-taken 0123456789abcdef0123456789abcdef PX 30000 >/dev/null
code=0
wait "$RUN" || code=$?
check "taken: run exits 3 (exit $code)" -- [ "$code" -eq 3 ]
check "taken: -v says the value that holds the key: $(cat "$DIR/err")" -- \
    grep -q '^relock: run: dl-taken is held: value 0123456789abcdef0123456789abcdef' "$DIR/err"

echo "measured: $MEASURED" >&2
finish cli_deadline
