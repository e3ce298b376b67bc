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
. "$(dirname "$0")/lib.sh"
cli_dir hold
HOLDS=()
cli_cleanup_more() { for p in "${HOLDS[@]}"; do kill -9 "$p" 2>/dev/null; done; }
start_redis
R() { "$RELOCK" -m modern "$@"; }
rcli() { redis-cli -p "$PORT" "$@"; }
now_ms() { date +%s%3N; }
key_gone() { [ "$(rcli exists "$1")" = 0 ]; }
matches() { [[ $1 =~ $2 ]]; }
# read_line FD VAR: one line from FD within 10 s.
read_line() { IFS= read -r -t 10 "$2" <&"$1"; }

# --- 1. the documented pattern (docs/cli.md): coproc, read, work, kill
export PATH="$(dirname "$RELOCK"):$PATH"
coproc relock -m modern hold -t 10s h-doc 2>"$DIR/err1"
hold=$COPROC_PID
HOLDS+=("$hold")
HPID=$hold
value='' fence=''
read -r -t 10 value fence <&"${COPROC[0]}" || bad "doc: nothing read"
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
kill "$hold"
code=0
wait "$hold" || code=$?
check "doc: SIGTERM: exit 0 (exit $code: $(cat "$DIR/err1"))" -- [ "$code" -eq 0 ]
check "doc: SIGTERM released the key" -- key_gone h-doc
check "doc: and its owner record" -- [ "$(rcli exists '{h-doc} relock:owner')" = 0 ]
R acquire -n h-doc >/dev/null 2>&1
check "doc: free for the next holder" -- [ $? -eq 0 ]

# --- 2. renewal across more than two lease lengths, then end of stdin
coproc H2 { exec "$RELOCK" -m modern hold -t 1500ms h-renew 2>"$DIR/err2"; }
H2P=$H2_PID H2OUT=${H2[0]} H2IN=${H2[1]}
HOLDS+=("$H2P")
line=''
read_line "$H2OUT" line
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
exec {H2IN}>&- # end of standard input
code=0
wait "$H2P" || code=$?
check "eof: exit 0 (exit $code: $(cat "$DIR/err2"))" -- [ "$code" -eq 0 ]
check "eof: released" -- key_gone h-renew

# --- 3. SIGINT and SIGHUP release too.  A background job of a
# non-interactive shell starts with SIGINT ignored, which relock respects,
# so hold starts here with the default action (env --default-signal).
for sig in INT HUP; do
    coproc H3 { exec env --default-signal=INT "$RELOCK" -m modern hold -t 10s "h-$sig" 2>"$DIR/err3"; }
    H3P=$H3_PID H3OUT=${H3[0]} H3IN=${H3[1]}
    HOLDS+=("$H3P")
    line=''
    read_line "$H3OUT" line
    check "$sig: held ($line)" -- [ -n "$(rcli get "h-$sig")" ]
    kill -s "$sig" "$H3P"
    code=0
    wait "$H3P" || code=$?
    check "$sig: exit 0 (exit $code: $(cat "$DIR/err3"))" -- [ "$code" -eq 0 ]
    check "$sig: released" -- key_gone "h-$sig"
done
# Ignored when relock started (nohup's SIGHUP): not a reason to release.
coproc H4 { trap '' HUP; exec "$RELOCK" -m modern hold -t 10s h-nohup 2>"$DIR/err4"; }
H4P=$H4_PID H4OUT=${H4[0]} H4IN=${H4[1]}
HOLDS+=("$H4P")
line=''
read_line "$H4OUT" line
kill -s HUP "$H4P"
sleep 0.3
check "ignored HUP: still held" -- [ -n "$(rcli get h-nohup)" ]
kill "$H4P"
wait "$H4P"
check "ignored HUP: SIGTERM released it" -- key_gone h-nohup

# --- 4. a break while held: the renewal finds it lost, exit 3 (said)
coproc H5 { exec "$RELOCK" -m modern hold -t 1500ms h-break 2>"$DIR/err5"; }
H5P=$H5_PID H5OUT=${H5[0]} H5IN=${H5[1]}
HOLDS+=("$H5P")
line=''
read_line "$H5OUT" line
R break h-break >/dev/null 2>&1
code=0
wait "$H5P" || code=$?
check "break: exit 3 (exit $code)" -- [ "$code" -eq 3 ]
check "break: said on stderr ($(cat "$DIR/err5"))" -- \
    grep -q "^relock: hold: lock lost while held: it was taken, deleted or expired$" "$DIR/err5"
coproc H6 { exec "$RELOCK" -m modern hold -t 1500ms --exit-lost 7 h-break7 2>"$DIR/err6"; }
H6P=$H6_PID H6OUT=${H6[0]} H6IN=${H6[1]}
HOLDS+=("$H6P")
line=''
read_line "$H6OUT" line
R break h-break7 >/dev/null 2>&1
code=0
wait "$H6P" || code=$?
check "break: --exit-lost 7 (exit $code)" -- [ "$code" -eq 7 ]

# --- 5. --json, and --owner
coproc H7 { exec "$RELOCK" -m modern hold --json --owner "db migration 42" h-json 2>"$DIR/err7"; }
H7P=$H7_PID H7OUT=${H7[0]} H7IN=${H7[1]}
HOLDS+=("$H7P")
line=''
read_line "$H7OUT" line
check "json: the line ($line)" -- matches "$line" \
    '^\{"name":"h-json","value":"[0-9a-f]{32}","fence":[0-9]+,"validity_ms":[0-9]+,"waited_ms":[0-9]+\}$'
R inspect h-json >"$DIR/out"
check "owner: the text given ($(cat "$DIR/out"))" -- \
    grep -q "^owner:   host=.* pid=$H7P at=.* caller_pid=$$ note=db migration 42$" "$DIR/out"
kill "$H7P"
wait "$H7P"
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

# Standard output closed: VALUE FENCE goes to /dev/null, never into the
# server's connection (which would take descriptor 1); the hold works.
coproc H8 { exec "$RELOCK" -m modern hold h-closed >&- 2>"$DIR/err8"; }
H8P=$H8_PID H8OUT=${H8[0]} H8IN=${H8[1]}
HOLDS+=("$H8P")
held_now() { [ -n "$(rcli get h-closed)" ]; }
check "closed stdout: held" -- wait_for held_now
kill "$H8P"
code=0
wait "$H8P" || code=$?
check "closed stdout: exit 0 (exit $code: $(cat "$DIR/err8"))" -- [ "$code" -eq 0 ]
check "closed stdout: released" -- key_gone h-closed
# A reader that went away before VALUE FENCE could be written: said,
# released, exit 4.  hold waits for a lock held here while the reader ends.
R acquire -t 30s h-epipe >"$DIR/ep"
read -r epv epf _ <"$DIR/ep"
coproc H9 { exec "$RELOCK" -m modern hold -w 10s h-epipe 2>"$DIR/err9"; }
H9P=$H9_PID H9OUT=${H9[0]} H9IN=${H9[1]}
HOLDS+=("$H9P")
exec {H9OUT}<&-
R release h-epipe "$epv" "$epf"
code=0
wait "$H9P" || code=$?
check "gone reader: exit 4 (exit $code)" -- [ "$code" -eq 4 ]
check "gone reader: said ($(cat "$DIR/err9"))" -- \
    grep -q "^relock: hold: cannot write VALUE FENCE: Broken pipe$" "$DIR/err9"
check "gone reader: released" -- wait_for key_gone h-epipe

# TERM while hold waits: the wait gives up at once, nothing held, and relock
# ends by the signal (143), as it did when the signal kept its default
# action; the lock's holder keeps it.
R acquire -t 30s h-term >"$DIR/tm"
read -r tmv tmf _ <"$DIR/tm"
"$RELOCK" -m modern hold -w 60s h-term >"$DIR/out10" 2>"$DIR/err10" </dev/null &
H10P=$!
HOLDS+=("$H10P")
sleep 0.5
kill -TERM "$H10P"
code=0
wait "$H10P" || code=$?
check "TERM while waiting: ended by the signal (exit $code: $(cat "$DIR/err10"))" -- [ "$code" -eq 143 ]
check "TERM while waiting: the holder keeps it" -- [ "$(rcli get h-term)" = "$tmv" ]
R release h-term "$tmv" "$tmf"

finish cli_hold
