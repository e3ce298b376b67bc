#!/usr/bin/env bash
# relock at the edges of the lease, against a real redis-server with real
# processes:
#   - run keeps the lock until CMD's whole process group is gone (a
#     background child outliving CMD), or ends what is left (--kill-rest);
#   - -k, --kill-after: SIGKILL after a forwarded SIGTERM that CMD ignores;
#   - relock killed: its guardian ends CMD's group, then releases the lock
#     (modern mode), so a waiter need not sit out the lease;
#   - hold without standard input (--no-stdin) as a plain background job,
#     and a loss told at once (--notify parent, --on-lost);
#   - release with a value from before an extend (bridge mode): what the key
#     holds and how to release it is said;
#   - a quorum with two of three servers down: acquire -w tries again until
#     its bound, and acquires once a server is back.
#   test_edges.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_edges.sh PATH/TO/relock}
. "$(dirname "$0")/lib.sh"
cli_dir edges
cli_cleanup_more() { for f in "$DIR"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; }
start_redis
R() { "$RELOCK" -m modern "$@"; }
rcli() { redis-cli -p "$PORT" "$@"; }
now_ms() { date +%s%3N; }
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
gone() { ! alive "$1"; }
has() { [ -s "$1" ]; }
held() { [ "$(rcli EXISTS "$1")" = 1 ]; }
free() { [ "$(rcli EXISTS "$1")" = 0 ]; }

# --- 1. a background child outlives CMD: the lock stays until it is gone
"$RELOCK" -m modern run -t 6s e-bg -- sh -c "sleep 2 & echo \$! >$DIR/bg.pid; echo done" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "bg: the background child started" -- wait_for has "$DIR/bg.pid"
BG=$(cat "$DIR/bg.pid")
sleep 0.5 # CMD (sh) is long gone; the sleep runs on
check "bg: the child runs on" -- alive "$BG"
check "bg: the lock is held while it runs" -- held e-bg
code=0
wait "$RUN" || code=$?
check "bg: run exits with CMD's 0 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 0 ]
check "bg: the child ended before run did" -- gone "$BG"
check "bg: released then" -- free e-bg

# --- 2. --kill-rest: what CMD left in its group is ended when CMD exits
t0=$(now_ms)
"$RELOCK" -m modern run --kill-rest -t 6s e-kr -- sh -c "sleep 60 & echo \$! >$DIR/kr.pid" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "kill-rest: the background child started" -- wait_for has "$DIR/kr.pid"
KR=$(cat "$DIR/kr.pid")
code=0
wait "$RUN" || code=$?
check "kill-rest: run exits 0 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 0 ]
check "kill-rest: run ended within 20 s, not the child's 60 ($(($(now_ms) - t0)) ms)" -- \
    [ $(($(now_ms) - t0)) -lt 20000 ]
check "kill-rest: the child was ended" -- wait_for gone "$KR"
check "kill-rest: released" -- free e-kr

# --- 3. -k: a CMD that ignores the forwarded SIGTERM gets SIGKILL
"$RELOCK" -m modern run -k 1s -t 10s e-k -- sh -c "trap '' TERM; echo \$\$ >$DIR/k.pid; while :; do sleep 0.05; done" \
    >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "kill-after: CMD started" -- wait_for has "$DIR/k.pid"
kill -TERM "$RUN"
t0=$(now_ms)
code=0
wait "$RUN" || code=$?
check "kill-after: CMD ended by SIGKILL, exit 137 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 137 ]
check "kill-after: within 10 s of the TERM ($(($(now_ms) - t0)) ms)" -- [ $(($(now_ms) - t0)) -lt 10000 ]
check "kill-after: released" -- free e-k

# --- 4. relock killed: the guardian ends the group (a quarter of the TTL
# at most), then the lock is released, long before its 20 s lease ends
"$RELOCK" -m modern run -t 20s e-die -- sh -c "echo \$\$ >$DIR/die.pid; sleep 60" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "die: CMD started" -- wait_for has "$DIR/die.pid"
DIE=$(cat "$DIR/die.pid")
kill -KILL "$RUN"
wait "$RUN" 2>/dev/null
t0=$(now_ms)
R acquire -w 12s e-die >"$DIR/out" 2>"$DIR/err"
code=$?
check "die: a waiter acquires within 12 s, not the 20 s lease (exit $code, $(($(now_ms) - t0)) ms: $(cat "$DIR/err"))" -- \
    [ "$code" -eq 0 ]
check "die: CMD was ended" -- wait_for gone "$DIE"

# --- 5. hold as a plain background job, without standard input
"$RELOCK" -m modern hold --no-stdin -t 3s e-hn </dev/null >"$DIR/hn.out" 2>"$DIR/hn.err" &
HN=$!
echo "$HN" >"$DIR/hn.pid"
check "no-stdin: VALUE FENCE printed" -- wait_for has "$DIR/hn.out"
sleep 1
check "no-stdin: still held though stdin is /dev/null ($(cat "$DIR/hn.err"))" -- held e-hn
kill -TERM "$HN"
code=0
wait "$HN" || code=$?
check "no-stdin: SIGTERM releases, exit 0 (exit $code)" -- [ "$code" -eq 0 ]
check "no-stdin: released" -- free e-hn

# --- 6. a loss told at once: SIGTERM to hold's parent, a command on loss
sh -c "trap 'echo lost >$DIR/nt.mark; exit 9' TERM
  \"$RELOCK\" -m modern hold --no-stdin --notify parent --on-lost 'echo \$RELOCK_NAME \$RELOCK_FENCE >$DIR/nt.cmd' \
      -t 3s e-nt >$DIR/nt.out 2>$DIR/nt.err </dev/null &
  echo \$! >$DIR/nt.pid
  while :; do sleep 0.05; done" &
SCRIPT=$!
check "notify: held" -- wait_for has "$DIR/nt.out" || kill -TERM "$SCRIPT"
read -r _ NTF <"$DIR/nt.out"
R break e-nt >/dev/null 2>&1
code=0
wait "$SCRIPT" || code=$?
check "notify: the script got SIGTERM and stopped (exit $code: $(cat "$DIR/nt.err"))" -- [ "$code" -eq 9 ]
check "notify: its trap ran" -- has "$DIR/nt.mark"
check "notify: --on-lost ran with RELOCK_NAME and RELOCK_FENCE ($(cat "$DIR/nt.cmd" 2>/dev/null))" -- \
    [ "$(cat "$DIR/nt.cmd" 2>/dev/null)" = "e-nt $NTF" ]
check "notify: hold said the loss" -- grep -q '^relock: hold: lock lost while held' "$DIR/nt.err"

# --- 6b. a COMMAND on loss that does not end: hold exits 3 within its
# bound (10 s) all the same, saying COMMAND was left running.
"$RELOCK" -m modern hold --no-stdin --on-lost "echo \$\$ >$DIR/hang.pid; exec sleep 97" \
    -t 3s e-hang >"$DIR/hang.out" 2>"$DIR/hang.err" </dev/null &
HOLD=$!
check "on-lost hang: held" -- wait_for has "$DIR/hang.out"
R break e-hang >/dev/null 2>&1
code=0
bounded() { for _ in $(seq 1 1000); do gone "$HOLD" && return 0; sleep 0.02; done; return 1; }
check "on-lost hang: hold ended within its bound" -- bounded || kill -9 "$HOLD"
wait "$HOLD" || code=$?
check "on-lost hang: exit 3 (exit $code)" -- [ "$code" -eq 3 ]
check "on-lost hang: says COMMAND was left running: $(cat "$DIR/hang.err")" -- \
    grep -q 'still runs after 10 s: left running' "$DIR/hang.err"
[ -s "$DIR/hang.pid" ] && kill -9 "$(cat "$DIR/hang.pid")" 2>/dev/null

# --- 7. bridge mode: release with the value from before an extend
B() { "$RELOCK" -m bridge "$@"; }
B acquire -t 30s e-st >"$DIR/out" 2>"$DIR/err"
read -r V1 F1 _ <"$DIR/out"
B extend -t 60s e-st "$V1" "$F1" >"$DIR/out" 2>"$DIR/err"
read -r V2 <"$DIR/out"
check "stale: extend wrote a new value ($V1 -> $V2)" -- [ "$V1" != "$V2" ]
expect 3 "stale: release with the old value: lost" -- B release e-st "$V1" "$F1"
check "stale: says what the key holds and how to release it: $(cat "$DIR/err")" -- \
    grep -q "the key holds $V2 and fence $F1 is still current.*relock release e-st $V2 $F1" "$DIR/err"
expect 0 "stale: the release it names works" -- B release e-st "$V2" "$F1"

# --- 8. a quorum with two of its three servers down: acquire -w goes on
# trying until its bound, and acquires once a second server is back
qserver() { # N PORT: a server on PORT, its pid in QPID[N]
    redis-server --port "$2" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
        --daemonize no --logfile "$DIR/q$1.log" &
    QPID[$1]=$!
    PIDS+=("$!")
    wait_for sh -c "redis-cli -p $2 ping 2>/dev/null | grep -q PONG"
}
QPORT=([1]=$(free_port) [2]=$(free_port) [3]=$(free_port))
QPID=()
for n in 1 2 3; do qserver "$n" "${QPORT[$n]}"; done
printf 'relock = {\n  mode = "modern";\n  servers = ( { host = "127.0.0.1"; port = %s; },\n    { host = "127.0.0.1"; port = %s; },\n    { host = "127.0.0.1"; port = %s; } );\n};\n' \
    "${QPORT[1]}" "${QPORT[2]}" "${QPORT[3]}" >"$DIR/q.conf"
for n in 2 3; do kill "${QPID[$n]}"; wait "${QPID[$n]}" 2>/dev/null; done
t0=$(now_ms)
env -u RELOCK_URL "$RELOCK" -c "$DIR/q.conf" acquire -w 2s e-q >"$DIR/out" 2>"$DIR/err"
code=$?
took=$(($(now_ms) - t0))
check "quorum down: exit 4 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 4 ]
check "quorum down: tried until the 2 s bound ($took ms)" -- [ "$took" -ge 1500 ]
env -u RELOCK_URL "$RELOCK" -c "$DIR/q.conf" acquire -w 10s e-q >"$DIR/out" 2>"$DIR/err" &
ACQ=$!
sleep 1
qserver 2 "${QPORT[2]}"
code=0
wait "$ACQ" || code=$?
check "quorum back: acquired once a second server answered (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 0 ]

finish cli_edges
