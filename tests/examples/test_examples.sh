#!/usr/bin/env bash
# The examples of docs/examples work as their comments say, against a real
# redis-server.   test_examples.sh BUILD_DIR
set -u
BUILD=${1:?usage: test_examples.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

DIR=$(mktemp -d /tmp/relock-examples-XXXXXX)
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
    --daemonize no --logfile "$DIR/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 1 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
export RELOCK_URL="redis://127.0.0.1:$PORT" PATH="$BUILD:$PATH" RELOCK_MODE=modern

# cron-job.sh: two runs at once; one works, the other is skipped with 75.
JOB_SECONDS=2 "$ROOT/docs/examples/cron-job.sh" >"$DIR/a.out" 2>&1 &
A=$!
for _ in $(seq 1 100); do [ "$(redis-cli -p "$PORT" EXISTS nightly-report)" = 1 ] && break; sleep 0.05; done
"$ROOT/docs/examples/cron-job.sh" >"$DIR/b.out" 2>&1
b=$?
wait "$A"
a=$?
{ [ "$a" -eq 0 ] && [ "$b" -eq 75 ]; } && ok || bad "cron-job.sh: first exit $a (want 0), second $b (want 75)"
grep -q "report run [0-9]* done" "$DIR/a.out" && ok || bad "cron-job.sh output: $(cat "$DIR/a.out")"

# fenced_service: holds its lock through 3 rounds of 1 s with a 3 s lease.
if "$BUILD/relock-fenced-service" "$RELOCK_URL" 3 >"$DIR/s.out" 2>&1; then ok; else bad "fenced service: $(cat "$DIR/s.out")"; fi
[ "$(redis-cli -p "$PORT" GET report:value)" = 2 ] && ok || bad "fenced service wrote $(redis-cli -p "$PORT" GET report:value)"
# A stale token is refused by the resource: raise the resource's fence.
redis-cli -p "$PORT" SET report:fence 999999 >/dev/null
"$BUILD/relock-fenced-service" "$RELOCK_URL" 1 >"$DIR/s2.out" 2>&1
[ $? -eq 3 ] && grep -q "refused fence" "$DIR/s2.out" && ok || bad "stale fence: $(cat "$DIR/s2.out")"

# migration-walkthrough.sh runs to its end.
if bash "$ROOT/docs/examples/migration-walkthrough.sh" "$BUILD" >"$DIR/w.out" 2>&1 &&
    grep -q "walkthrough complete" "$DIR/w.out"; then ok; else bad "walkthrough: $(tail -5 "$DIR/w.out")"; fi

# async_libevent.c: five tasks on one loop take turns; async_libuv.c: a
# lock kept by the loop's timers through 2 s with a 1 s lease.
if [ -x "$BUILD/relock-async-libevent" ]; then
    if "$BUILD/relock-async-libevent" "$RELOCK_URL" 5 >"$DIR/ae.out" 2>&1 &&
        [ "$(grep -c "holds the lock" "$DIR/ae.out")" -eq 5 ] &&
        grep -q "5 turns, 0 failures" "$DIR/ae.out"; then ok; else bad "async_libevent: $(cat "$DIR/ae.out")"; fi
else
    bad "relock-async-libevent was not built (libevent-dev)"
fi
if [ -x "$BUILD/relock-async-libuv" ]; then
    if "$BUILD/relock-async-libuv" "$RELOCK_URL" 2 >"$DIR/au.out" 2>&1 &&
        grep -q "released: ok" "$DIR/au.out"; then ok; else bad "async_libuv: $(cat "$DIR/au.out")"; fi
    [ "$(redis-cli -p "$PORT" EXISTS async-keeper)" = 0 ] && ok || bad "async_libuv left its key"
else
    bad "relock-async-libuv was not built (libuv1-dev)"
fi

# async_poll.c: the same on a loop of its own around poll(2), through the
# watch and timer functions of relock_async_loop alone.
if "$BUILD/relock-async-poll" "$RELOCK_URL" 2 >"$DIR/ap.out" 2>&1 &&
    grep -q "holding async-poll" "$DIR/ap.out" && grep -q "released: ok" "$DIR/ap.out"; then
    ok
else
    bad "async_poll: $(cat "$DIR/ap.out")"
fi
[ "$(redis-cli -p "$PORT" EXISTS async-poll)" = 0 ] && ok || bad "async_poll left its key"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
