#!/usr/bin/env bash
# relock hold keeps a lock across several shell commands, against a real
# redis-server:
#   - the documented coproc pattern: VALUE FENCE on one line, the lock
#     refused to others while held, released by SIGTERM;
#   - renewal: held across more than two lease lengths, renewals seen;
#   - end of standard input, SIGINT and SIGHUP release too;
#   - a relock break while held: exit 3 (or --exit-lost), said on stderr;
#   - --json, -n on a held lock, -E, usage errors.
#   test_hold.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_hold.sh PATH/TO/relock}
PY=/usr/bin/python3

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
check() {
    local what=$1
    shift 2
    if "$@"; then ok; else bad "$what"; fi
}

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

DIR=$(mktemp -d /tmp/relock-hold-XXXXXX)
PIDS=()
HOLDS=()
cleanup() {
    for p in "${HOLDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$DIR"
}
trap cleanup EXIT

PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
    --daemonize no --logfile "$DIR/server.log" &
PIDS+=($!)
for _ in $(seq 1 200); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
    sleep 0.05
done
export RELOCK_URL="redis://127.0.0.1:$PORT"
R() { "$RELOCK" -m modern "$@"; }
rcli() { redis-cli -p "$PORT" "$@"; }
now_ms() { date +%s%3N; }
key_gone() { [ "$(rcli exists "$1")" = 0 ]; }
# wait_for CMD...: up to 10 s for CMD to succeed.
wait_for() {
    for _ in $(seq 1 500); do "$@" && return 0; sleep 0.02; done
    return 1
}
matches() { [[ $1 =~ $2 ]]; }
# read_line FD VAR: one line from FD within 10 s.
read_line() { IFS= read -r -t 10 "$2" <&"$1"; }

# --- 1. the documented pattern (docs/cli.md): coproc, read, work, kill
export PATH="$(dirname "$RELOCK"):$PATH"
coproc relock -m modern hold -t 10s h-doc 2>"$DIR/err1"
HOLDS+=("$COPROC_PID")
HPID=$COPROC_PID
value='' fence=''
read -r -t 10 value fence <&"${COPROC[0]}"
check "doc: a 32-hex value ($value)" -- matches "$value" '^[0-9a-f]{32}$'
check "doc: a fence ($fence)" -- matches "$fence" '^[1-9][0-9]*$'
check "doc: the key holds the value printed" -- [ "$(rcli get h-doc)" = "$value" ]
R acquire -n h-doc >"$DIR/out" 2>"$DIR/err"
code=$?
check "doc: acquire -n refused while held (exit $code)" -- [ "$code" -eq 1 ]
check "doc: acquire says held ($(cat "$DIR/err"))" -- grep -q "^relock: acquire: lock h-doc is held" "$DIR/err"
R inspect --json h-doc >"$DIR/out"
check "doc: the owner is hold itself ($(cat "$DIR/out"))" -- grep -q "\"owner_pid\":$HPID," "$DIR/out"
check "doc: and its caller, this shell ($$)" -- grep -q "\"owner_caller_pid\":$$," "$DIR/out"
kill "$HPID"
code=0
wait "$HPID" || code=$?
check "doc: SIGTERM: exit 0 (exit $code: $(cat "$DIR/err1"))" -- [ "$code" -eq 0 ]
check "doc: SIGTERM released the key" -- key_gone h-doc
check "doc: and its owner record" -- [ "$(rcli exists '{h-doc} relock:owner')" = 0 ]
R acquire -n h-doc >/dev/null 2>&1
check "doc: free for the next holder" -- [ $? -eq 0 ]

# --- 2. renewal across more than two lease lengths, then end of stdin
coproc H2 { exec "$RELOCK" -m modern hold -t 1500ms h-renew 2>"$DIR/err2"; }
HOLDS+=("$H2_PID")
line=''
read_line "${H2[0]}" line
t0=$(now_ms)
value=${line%% *}
check "renew: held ($line)" -- [ "$(rcli get h-renew)" = "$value" ]
# A renewal sets the TTL back to the lease: count the rises of PTTL until
# 2.5 leases have passed and at least 4 renewals were seen (at most 15 s).
renewals=0
last=$(rcli pttl h-renew)
for _ in $(seq 1 300); do
    sleep 0.05
    cur=$(rcli pttl h-renew)
    [ "$cur" -gt "$last" ] 2>/dev/null && renewals=$((renewals + 1))
    last=$cur
    [ "$cur" -le 0 ] 2>/dev/null && break
    [ $(($(now_ms) - t0)) -ge 3750 ] && [ "$renewals" -ge 4 ] && break
done
held_ms=$(($(now_ms) - t0))
check "renew: held $held_ms ms, over two leases" -- [ "$held_ms" -ge 3000 ]
check "renew: $renewals renewals seen" -- [ "$renewals" -ge 4 ]
check "renew: the key still holds the value" -- [ "$(rcli get h-renew)" = "$value" ]
R acquire -n h-renew >/dev/null 2>&1
check "renew: still refused to others" -- [ $? -eq 1 ]
exec {H2[1]}>&- # end of standard input
code=0
wait "$H2_PID" || code=$?
check "eof: exit 0 (exit $code: $(cat "$DIR/err2"))" -- [ "$code" -eq 0 ]
check "eof: released" -- key_gone h-renew

# --- 3. SIGINT and SIGHUP release too.  A background job of a
# non-interactive shell starts with SIGINT ignored, which relock respects,
# so hold starts here with the default action (env --default-signal).
for sig in INT HUP; do
    coproc H3 { exec env --default-signal=INT "$RELOCK" -m modern hold -t 10s "h-$sig" 2>"$DIR/err3"; }
    HOLDS+=("$H3_PID")
    line=''
    read_line "${H3[0]}" line
    check "$sig: held ($line)" -- [ -n "$(rcli get "h-$sig")" ]
    kill -s "$sig" "$H3_PID"
    code=0
    wait "$H3_PID" || code=$?
    check "$sig: exit 0 (exit $code: $(cat "$DIR/err3"))" -- [ "$code" -eq 0 ]
    check "$sig: released" -- key_gone "h-$sig"
done
# Ignored when relock started (nohup's SIGHUP): not a reason to release.
coproc H4 { trap '' HUP; exec "$RELOCK" -m modern hold -t 10s h-nohup 2>"$DIR/err4"; }
HOLDS+=("$H4_PID")
line=''
read_line "${H4[0]}" line
kill -s HUP "$H4_PID"
sleep 0.3
check "ignored HUP: still held" -- [ -n "$(rcli get h-nohup)" ]
kill "$H4_PID"
wait "$H4_PID"
check "ignored HUP: SIGTERM released it" -- key_gone h-nohup

# --- 4. a break while held: the renewal finds it lost, exit 3 (said)
coproc H5 { exec "$RELOCK" -m modern hold -t 1500ms h-break 2>"$DIR/err5"; }
HOLDS+=("$H5_PID")
line=''
read_line "${H5[0]}" line
R break h-break >/dev/null 2>&1
code=0
wait "$H5_PID" || code=$?
check "break: exit 3 (exit $code)" -- [ "$code" -eq 3 ]
check "break: said on stderr ($(cat "$DIR/err5"))" -- \
    grep -q "^relock: hold: lock lost while held: it was taken, deleted or expired$" "$DIR/err5"
coproc H6 { exec "$RELOCK" -m modern hold -t 1500ms --exit-lost 7 h-break7 2>"$DIR/err6"; }
HOLDS+=("$H6_PID")
line=''
read_line "${H6[0]}" line
R break h-break7 >/dev/null 2>&1
code=0
wait "$H6_PID" || code=$?
check "break: --exit-lost 7 (exit $code)" -- [ "$code" -eq 7 ]

# --- 5. --json, and --owner
coproc H7 { exec "$RELOCK" -m modern hold --json --owner "db migration 42" h-json 2>"$DIR/err7"; }
HOLDS+=("$H7_PID")
line=''
read_line "${H7[0]}" line
check "json: the line ($line)" -- matches "$line" \
    '^\{"name":"h-json","value":"[0-9a-f]{32}","fence":[0-9]+,"validity_ms":[0-9]+,"waited_ms":[0-9]+\}$'
R inspect h-json >"$DIR/out"
check "owner: the text given ($(cat "$DIR/out"))" -- \
    grep -q "^owner:   host=.* pid=$H7_PID at=.* caller_pid=$$ note=db migration 42$" "$DIR/out"
kill "$H7_PID"
wait "$H7_PID"
check "json: released" -- key_gone h-json

# --- 6. not acquired, usage
R acquire -t 30s h-busy >/dev/null
"$RELOCK" -m modern hold -n h-busy >"$DIR/out" 2>"$DIR/err" </dev/null
code=$?
check "busy: exit 1 (exit $code)" -- [ "$code" -eq 1 ]
check "busy: said ($(cat "$DIR/err"))" -- grep -q "^relock: hold: lock h-busy is held" "$DIR/err"
check "busy: nothing printed" -- [ ! -s "$DIR/out" ]
"$RELOCK" -m modern hold -n -E 9 h-busy >/dev/null 2>&1 </dev/null
code=$?
check "busy: -E 9 (exit $code)" -- [ "$code" -eq 9 ]
"$RELOCK" -m modern hold -w 300ms h-busy >/dev/null 2>"$DIR/err" </dev/null
code=$?
check "busy: -w bound (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 1 ]
usage() {
    local what=$1 msg=$2
    shift 2
    "$RELOCK" -m modern hold "$@" >"$DIR/out" 2>"$DIR/err" </dev/null
    local code=$?
    check "usage $what: exit 2 (exit $code)" -- [ "$code" -eq 2 ]
    check "usage $what: '$msg' ($(cat "$DIR/err"))" -- grep -q "^relock: $msg" "$DIR/err"
}
usage "no NAME" "hold: expected one NAME"
usage "two NAMEs" "hold: expected one NAME" a b
usage "empty --owner" "hold: --owner: the text is empty" --owner '' x
usage "bad -t" "-t: " -t 1x x
usage "-w and -n" "-w and -n exclude each other" -w 1 -n x
"$RELOCK" hold --help >"$DIR/out"
check "help: names hold" -- grep -q "^usage: relock hold" "$DIR/out"
# With stdin at its end from the start (/dev/null), the hold ends at once,
# released.
"$RELOCK" -m modern hold h-null >"$DIR/out" 2>"$DIR/err" </dev/null
code=$?
check "stdin /dev/null: exit 0 at once (exit $code)" -- [ "$code" -eq 0 ]
check "stdin /dev/null: printed VALUE FENCE" -- grep -Eq '^[0-9a-f]{32} [0-9]+$' "$DIR/out"
check "stdin /dev/null: released" -- key_gone h-null

echo "cli_hold: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
