#!/usr/bin/env bash
# relock break against a real redis-server: every exit code (0 deleted,
# 1 nothing to delete, 3 the key holds another value, 2 usage, 4 not a lock
# or a server error), a value that is no lock refused without --force,
# --dry-run deleting nothing,
# the output, the fence counter moved on, a break in the middle of a run in
# every mode, waiters woken by the release notice, and the three server paths through the compat proxy: a script
# (2.6), WATCH (2.2) and plain GET + MULTI (2.0), including the 2.0 window.
#   test_break.sh PATH/TO/relock [PATH/TO/relock-compat-proxy]
set -u
RELOCK=${1:?usage: test_break.sh PATH/TO/relock [PATH/TO/relock-compat-proxy]}
PROXY=${2:-}
PY=/usr/bin/python3

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

DIR=$(mktemp -d /tmp/relock-break-XXXXXX)
PIDS=()
cleanup() {
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

# expect CODE DESCRIPTION -- COMMAND...: runs it, checks the exit code and
# that every error is one line "relock: ...".
expect() {
    local want=$1 what=$2
    shift 3
    "$@" >"$DIR/out" 2>"$DIR/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        bad "$what: exit $got, expected $want; stdout: $(cat "$DIR/out"); stderr: $(cat "$DIR/err")"
        return
    fi
    if [ -s "$DIR/err" ] && ! grep -q '^relock: ' "$DIR/err"; then
        bad "$what: stderr not in 'relock: what: why' form: $(cat "$DIR/err")"
        return
    fi
    if [ "$(wc -l <"$DIR/err")" -gt 1 ]; then
        bad "$what: more than one line on stderr: $(cat "$DIR/err")"
        return
    fi
    ok
}
# check DESCRIPTION -- COMMAND...: a plain assertion.
check() {
    local what=$1
    shift 2
    if "$@"; then ok; else bad "$what"; fi
}
out_has() { grep -qF -- "$1" "$DIR/out"; }
err_has() { grep -qF -- "$1" "$DIR/err"; }

# --- --if-value: 0 deleted, 3 another value, 1 nothing to delete
expect 0 "acquire" -- R acquire -t 30s brk-a
read -r VA FA _ <"$DIR/out"
fence_key="{brk-a} relock:fence"
expect 3 "break --if-value with another value" -- R break brk-a --if-value 0123456789abcdef0123456789abcdef
check "mismatch names the value held now: $(cat "$DIR/err")" -- err_has "break brk-a: nothing deleted: the key holds another value ($VA, not 0123456789abcdef0123456789abcdef)"
check "mismatch deleted nothing" -- [ "$(rcli GET brk-a)" = "$VA" ]
check "mismatch printed nothing on stdout" -- [ ! -s "$DIR/out" ]
expect 0 "break --if-value VALUE" -- R break brk-a --if-value "$VA"
check "break prints what it deleted: $(cat "$DIR/out")" -- [ "$(cat "$DIR/out")" = "deleted brk-a, which held $VA" ]
check "break deleted the key" -- [ "$(rcli EXISTS brk-a)" = 0 ]
# The delete moves the fence on, so the broken holder's checks fail.
check "break moved the fence counter on from $FA" -- [ "$(rcli GET "$fence_key")" = $((FA + 1)) ]
expect 1 "break --if-value on an absent key" -- R break brk-a --if-value "$VA"
check "absent message: $(cat "$DIR/err")" -- err_has "nothing to delete: the key is absent"
expect 1 "break on an absent key" -- R break brk-a
expect 3 "the holder's release after a break" -- R release brk-a "$VA" "$FA"
expect 0 "--if-value=VALUE and the option first" -- R acquire -t 30s brk-b
read -r VB _ _ <"$DIR/out"
expect 0 "break --if-value=VALUE NAME" -- R break --if-value="$VB" brk-b
check "key gone" -- [ "$(rcli EXISTS brk-b)" = 0 ]

# --- --if-fence: timestamps repeat, the fence tells holders apart
expect 2 "--if-fence without --if-value" -- R break brk-f --if-fence 3
expect 2 "--if-fence not a number" -- R break brk-f --if-value v --if-fence 3x
expect 2 "--if-fence 0" -- R break brk-f --if-value v --if-fence 0
printf 'relock = { mode = "legacy"; legacy = { clock_unit = "s"; }; };\n' >"$DIR/legacy-s.conf"
L() { "$RELOCK" -c "$DIR/legacy-s.conf" "$@"; }
expect 0 "legacy acquire" -- L acquire -t 30s brk-f
read -r VF FF _ <"$DIR/out"
# The holder's lock is released; the next takes it, maybe in the same second.
expect 0 "legacy release" -- L release brk-f "$VF" "$FF"
expect 0 "legacy acquire again" -- L acquire -t 30s brk-f
read -r VF2 FF2 _ <"$DIR/out"
check "the next holder's fence is above ($FF2 > $FF)" -- [ "$FF2" -gt "$FF" ]
expect 3 "break --if-value of the last holder, old fence" -- L break brk-f --if-value "$VF" --if-fence "$FF"
check "the next holder's lock is kept" -- [ "$(rcli GET brk-f)" = "$VF2" ]
if [ "$VF" = "$VF2" ]; then
    check "same value, the fence told: $(cat "$DIR/err")" -- err_has "fence $FF is no longer current"
fi
expect 0 "break --if-value --if-fence of the holder" -- L break brk-f --if-value "$VF2" --if-fence "$FF2"
check "deleted" -- [ "$(rcli EXISTS brk-f)" = 0 ]

# --- without --if-value: whatever the key holds, and it says what
expect 0 "acquire" -- R acquire -t 30s brk-c
read -r VC FC _ <"$DIR/out"
expect 0 "break NAME" -- R break brk-c
check "unconditional break names value, format, ttl and fence: $(cat "$DIR/out")" -- \
    grep -Eq "^deleted brk-c, which held $VC \(token, ttl [0-9]+ ms, fence $FC\)$" "$DIR/out"
check "key gone" -- [ "$(rcli EXISTS brk-c)" = 0 ]
rcli SET brk-legacy 1700000000 >/dev/null
expect 0 "break a legacy leftover" -- R break brk-legacy
check "legacy value described: $(cat "$DIR/out")" -- out_has "deleted brk-legacy, which held 1700000000 (timestamp, no ttl, fence 0)"
rcli SET brk-text "hello world" >/dev/null
expect 3 "break --if-value on foreign text, mismatch" -- R break brk-text --if-value hello
expect 4 "break --if-value on foreign text, exact, no --force" -- R break brk-text --if-value "hello world"
check "refused: text kept" -- [ "$(rcli GET brk-text)" = "hello world" ]
expect 0 "break --if-value on foreign text, exact, --force" -- R break brk-text --if-value "hello world" --force
check "forced: text deleted" -- [ "$(rcli EXISTS brk-text)" = 0 ]

# --- a value that is no lock: refused without --force (with the default
# empty key_prefix every key is a lock name), deleted with it
rcli SET brk-app '{"user":42}' >/dev/null
expect 4 "break of an application key (JSON)" -- R break brk-app
check "says it is no lock, and how to force: $(cat "$DIR/err")" -- \
    err_has 'relock: break: break brk-app: the key holds "{"user":42}" (unknown, no ttl, fence 0), which is no lock relock knows; nothing deleted (--force deletes it anyway)'
check "printed nothing on stdout" -- [ ! -s "$DIR/out" ]
check "the application key is still there" -- [ "$(rcli GET brk-app)" = '{"user":42}' ]
expect 4 "--dry-run of an application key" -- R break brk-app --dry-run
check "dry run says it would not: $(cat "$DIR/err")" -- err_has "which is no lock relock knows; it would not be deleted"
check "still there after the dry run" -- [ "$(rcli GET brk-app)" = '{"user":42}' ]
expect 0 "--force --dry-run of an application key" -- R break brk-app --force --dry-run
check "forced dry run says what: $(cat "$DIR/out")" -- \
    [ "$(cat "$DIR/out")" = 'would delete brk-app, which holds {"user":42} (unknown, no ttl, fence 0)' ]
check "still there after the forced dry run" -- [ "$(rcli GET brk-app)" = '{"user":42}' ]
expect 0 "--force deletes an application key" -- R break brk-app --force
check "forced: says what it deleted: $(cat "$DIR/out")" -- \
    out_has 'deleted brk-app, which held {"user":42} (unknown, no ttl, fence 0)'
check "forced: the key is gone" -- [ "$(rcli EXISTS brk-app)" = 0 ]
# What scan calls unknown is refused: a counter, a token without TTL (an
# md5 in hex looks like one), a timestamp of neither 10 nor 13 digits.
for v in 42 0123456789abcdef0123456789abcdef 17000000000; do
    rcli SET brk-odd "$v" >/dev/null
    expect 4 "no lock: $v" -- R break brk-odd
    check "no lock: $v kept" -- [ "$(rcli GET brk-odd)" = "$v" ]
done
rcli PEXPIRE brk-odd 60000 >/dev/null
rcli SET brk-odd 0123456789abcdef0123456789abcdef PX 60000 >/dev/null
expect 0 "a token with a TTL is a lock" -- R break brk-odd
check "token deleted" -- [ "$(rcli EXISTS brk-odd)" = 0 ]
rcli SET brk-odd "$(($(date +%s) + 600))" >/dev/null
expect 0 "a live legacy timestamp is a lock" -- R break brk-odd
rcli SET brk-odd "$(($(date +%s) + 600))123" PX 60000 >/dev/null
expect 0 "a bridge timestamp in ms is a lock" -- R break brk-odd
check "ms timestamp deleted" -- [ "$(rcli EXISTS brk-odd)" = 0 ]
# A value longer than any lock value is refused, and kept whole.
long=$(printf 'x%.0s' $(seq 1 300))
rcli SET brk-long "$long" >/dev/null
expect 4 "a 300-byte value" -- R break brk-long
check "long value kept" -- [ "$(rcli STRLEN brk-long)" = 300 ]
check "the refusal shows the whole value, uncut: $(cat "$DIR/err")" -- err_has "holds \"$long\" (unknown"
expect 0 "inspect of a 300-byte value" -- R inspect brk-long
check "inspect shows the whole value: $(cat "$DIR/out")" -- out_has "value:   $long"
expect 0 "a 300-byte value, --force" -- R break brk-long --force
check "forced break names the whole value it deleted: $(cat "$DIR/out")" -- out_has "which held $long (unknown"
check "long value deleted" -- [ "$(rcli EXISTS brk-long)" = 0 ]

# --- --dry-run: says what would be deleted, deletes nothing
expect 0 "acquire for the dry run" -- R acquire -t 30s brk-d
read -r VD FD _ <"$DIR/out"
expect 0 "--dry-run of a lock" -- R break brk-d --dry-run
check "dry run names value, format, ttl and fence: $(cat "$DIR/out")" -- \
    grep -Eq "^would delete brk-d, which holds $VD \(token, ttl [0-9]+ ms, fence $FD\)$" "$DIR/out"
check "dry run deleted nothing" -- [ "$(rcli GET brk-d)" = "$VD" ]
check "dry run moved no fence" -- [ "$(rcli GET "{brk-d} relock:fence")" = "$FD" ]
expect 0 "--dry-run --if-value VALUE --if-fence FENCE" -- R break brk-d --if-value "$VD" --if-fence "$FD" --dry-run
check "conditional dry run output: $(cat "$DIR/out")" -- out_has "would delete brk-d, which holds $VD (token"
expect 3 "--dry-run --if-value, another value" -- R break brk-d --if-value 0123456789abcdef0123456789abcdef --dry-run
check "says nothing would be deleted: $(cat "$DIR/err")" -- err_has "nothing would be deleted: the key holds another value ($VD, not 0123456789abcdef0123456789abcdef)"
expect 3 "--dry-run --if-fence, a fence moved on" -- R break brk-d --if-value "$VD" --if-fence $((FD + 1)) --dry-run
check "says the fence moved: $(cat "$DIR/err")" -- err_has "fence $((FD + 1)) is no longer current (now $FD)"
check "still held after every dry run" -- [ "$(rcli GET brk-d)" = "$VD" ]
expect 0 "the holder still releases after the dry runs" -- R release brk-d "$VD" "$FD"
expect 1 "--dry-run of an absent key" -- R break brk-d --dry-run
check "says nothing to delete: $(cat "$DIR/err")" -- err_has "break brk-d: nothing to delete: the key is absent"
check "printed nothing on stdout" -- [ ! -s "$DIR/out" ]
rcli SET brk-d 1700000000 >/dev/null
expect 0 "--dry-run of a stale legacy value" -- R break brk-d --dry-run
check "stale value output: $(cat "$DIR/out")" -- out_has "would delete brk-d, which holds 1700000000 (timestamp, no ttl, fence"
check "stale value kept by the dry run" -- [ "$(rcli GET brk-d)" = 1700000000 ]
# Every mode breaks the same way: the mode does not matter.
for m in legacy bridge modern; do
    rcli SET brk-mode 1700000000 >/dev/null
    expect 0 "break in mode $m" -- "$RELOCK" -m "$m" break brk-mode --if-value 1700000000
done
# key_prefix applies, and relock's own keys cannot be named.
printf 'relock = { key_prefix = "app:"; };\n' >"$DIR/prefix.conf"
rcli SET app:brk-p 1700000000 >/dev/null
expect 0 "break with key_prefix" -- "$RELOCK" -c "$DIR/prefix.conf" break brk-p
check "prefixed key gone" -- [ "$(rcli EXISTS app:brk-p)" = 0 ]
expect 2 "a name with a space (relock's own keys have one)" -- R break "brk-a relock:fence"
check "fence counter still there" -- [ "$(rcli GET "$fence_key")" = $((FA + 1)) ]

# --- usage and server errors
expect 2 "no NAME" -- R break
expect 2 "two NAMEs" -- R break a b
expect 2 "--if-value without a value" -- R break brk-x --if-value
expect 2 "--if-value empty" -- R break brk-x --if-value ""
expect 2 "unknown option" -- R break brk-x --forse
expect 0 "break --help" -- R break --help
check "break --help prints the usage" -- out_has "usage: relock break NAME [--if-value VALUE [--if-fence FENCE]] [--force] [--dry-run]"
expect 0 "relock --help lists break" -- "$RELOCK" --help
check "usage lists break: $(grep break "$DIR/out")" -- out_has "break   NAME [--if-value VALUE [--if-fence FENCE]] [--force] [--dry-run]"
rcli RPUSH brk-list a >/dev/null
expect 4 "break on a list (not a lock)" -- R break brk-list
check "names the type: $(cat "$DIR/err")" -- err_has "holds a list, not a lock"
expect 4 "break --if-value on a list" -- R break brk-list --if-value a
expect 4 "break --force on a list" -- R break brk-list --force
check "--force does not reach other types: $(cat "$DIR/err")" -- err_has "holds a list, not a lock"
expect 4 "break --force --if-value on a list" -- R break brk-list --force --if-value a
check "the list is untouched" -- [ "$(rcli LLEN brk-list)" = 1 ]
expect 4 "unreachable server" -- "$RELOCK" -u "redis://127.0.0.1:$(free_port)" break brk-x

# --- waiters wake on the notice at once.  Backoff of 5 s and more, and a
# holder's TTL of 60 s: only the notice can wake the waiter within 2 s.
printf 'relock = { mode = "modern"; wait = { backoff_min_ms = 5000; backoff_max_ms = 10000; }; };\n' >"$DIR/slow.conf"
expect 0 "acquire for the waiter" -- R acquire -t 60s brk-w
read -r VW _ _ <"$DIR/out"
"$RELOCK" -c "$DIR/slow.conf" acquire -w 30s brk-w >"$DIR/wout" 2>"$DIR/werr" &
WAITER=$!
# The waiter has subscribed once the channel has a subscriber.
for _ in $(seq 1 100); do
    [ "$(rcli PUBSUB NUMSUB 'brk-w relock:released' | tail -1)" = 1 ] && break
    sleep 0.05
done
start=$(date +%s%N)
expect 0 "break a lock with a waiter" -- R break brk-w --if-value "$VW"
wait "$WAITER"
code=$?
el=$((($(date +%s%N) - start) / 1000000))
check "the waiter acquired (exit $code: $(cat "$DIR/werr"))" -- [ "$code" -eq 0 ]
check "the waiter woke ${el} ms after the break (notice expected)" -- [ "$el" -lt 2000 ]

# --- a break in the middle of a run, then a new holder: a classic client's
# SETNX (a TTL-less timestamp, like a GETSET loser's write) or another relock
# client.  In every mode the run's next renewal reports the loss (exit 3),
# and the new holder's value is left alone.
for m in legacy bridge modern; do
    printf 'relock = { mode = "%s"; legacy = { clock_unit = "s"; }; };\n' "$m" >"$DIR/run-$m.conf"
    for who in classic relock; do
        k="brk-run-$m-$who"
        "$RELOCK" -c "$DIR/run-$m.conf" run -t 3s "$k" -- sh -c 'exec sleep 20' \
            >"$DIR/rout" 2>"$DIR/rerr" &
        RUN=$!
        for _ in $(seq 1 200); do [ "$(rcli EXISTS "$k")" = 1 ] && break; sleep 0.05; done
        expect 0 "$m: break during run ($who next)" -- "$RELOCK" -c "$DIR/run-$m.conf" break "$k"
        if [ "$who" = classic ]; then
            NEWV=$(($(date +%s) + 30))
            check "$m: the classic SETNX wins" -- [ "$(rcli SETNX "$k" "$NEWV")" = 1 ]
        else
            expect 0 "$m: relock acquires after the break" -- \
                "$RELOCK" -c "$DIR/run-$m.conf" acquire -t 30s "$k"
            read -r NEWV _ _ <"$DIR/out"
        fi
        code=0
        wait "$RUN" || code=$?
        check "$m/$who: run reports the loss (exit $code, $(cat "$DIR/rerr"))" -- [ "$code" -eq 3 ]
        check "$m/$who: the new holder's value is intact" -- [ "$(rcli GET "$k")" = "$NEWV" ]
        rcli DEL "$k" >/dev/null
    done
done

# --- old servers through the compat proxy: each path of relock_break()
if [ -n "$PROXY" ] && [ -x "$PROXY" ]; then
    for pers in 2.0 2.2 2.4 2.6.0; do
        PPORT=$(free_port)
        "$PROXY" --upstream "127.0.0.1:$PORT" --listen "$PPORT" --personality "$pers" >/dev/null &
        PPID_=$!
        PIDS+=($PPID_)
        for _ in $(seq 1 200); do redis-cli -p "$PPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
        P() { "$RELOCK" -u "redis://127.0.0.1:$PPORT" -m legacy "$@"; }
        k="brk-old-$pers"
        if [ "$pers" = 2.4 ]; then
            # The library names the setting; the command adds its option.
            expect 2 "$pers: modern refused" -- "$RELOCK" -u "redis://127.0.0.1:$PPORT" -m modern acquire "$k"
            check "$pers: the library's fact, then the command's advice: $(cat "$DIR/err")" -- \
                err_has 'lacks SET NX PX (needs 2.6.12); use mode "legacy" (-m legacy selects it for one command)'
            check "$pers: the option is named once, by the command" -- [ "$(grep -o -- "-m legacy" "$DIR/err" | wc -l)" = 1 ]
            expect 2 "$pers: bridge refused" -- "$RELOCK" -u "redis://127.0.0.1:$PPORT" -m bridge acquire "$k"
            check "$pers: bridge refusal advice: $(cat "$DIR/err")" -- err_has 'use mode "legacy" (-m legacy selects it for one command)'
        fi
        expect 0 "$pers: acquire" -- P acquire -t 30s "$k"
        read -r VO FO _ <"$DIR/out"
        expect 3 "$pers: break --if-value, another value" -- P break "$k" --if-value 1700000000
        check "$pers: nothing deleted" -- [ "$(rcli GET "$k")" = "$VO" ]
        if [ "$pers" = 2.0 ]; then
            expect 2 "$pers: --if-fence refused" -- P break "$k" --if-value "$VO" --if-fence "$FO"
            check "$pers: says why: $(cat "$DIR/err")" -- err_has "also counts failed attempts"
        else
            expect 3 "$pers: --if-fence, a fence moved on" -- P break "$k" --if-value "$VO" --if-fence $((FO + 1))
            check "$pers: nothing deleted" -- [ "$(rcli GET "$k")" = "$VO" ]
        fi
        expect 0 "$pers: break --if-value VALUE" -- P break "$k" --if-value "$VO"
        check "$pers: deleted" -- [ "$(rcli EXISTS "$k")" = 0 ]
        expect 1 "$pers: break an absent key" -- P break "$k" --if-value "$VO"
        expect 1 "$pers: break an absent key, no value" -- P break "$k"
        rcli SET "$k" 1700000000 >/dev/null
        expect 0 "$pers: break, no value" -- P break "$k"
        check "$pers: output: $(cat "$DIR/out")" -- out_has "which held 1700000000 (timestamp"
        check "$pers: deleted" -- [ "$(rcli EXISTS "$k")" = 0 ]
        check "$pers: fence counter moved on from $FO" -- [ "$(rcli GET "{$k} relock:fence")" -gt "$FO" ]
        if [ "$pers" = 2.0 ]; then
            # No WATCH: holders compare a counter of breaks alone.
            check "$pers: breaks counted" -- [ "$(rcli GET "{$k} relock:breaks")" -ge 2 ]
        else
            check "$pers: no break counter" -- [ "$(rcli EXISTS "{$k} relock:breaks")" = 0 ]
        fi
        kill "$PPID_" 2>/dev/null
        wait "$PPID_" 2>/dev/null
    done

    # 2.0: a broken holder's release and extend from the command line (each
    # a handle adopted from VALUE and FENCE) find the lock lost and write
    # nothing, though whoever took the free key in the same second wrote
    # the same timestamp.  The counter of breaks is unknown to such a
    # handle; the fence a break raises into a new epoch is not.
    PPORT=$(free_port)
    "$PROXY" --upstream "127.0.0.1:$PORT" --listen "$PPORT" --personality 2.0 >/dev/null &
    PPID_=$!
    PIDS+=($PPID_)
    for _ in $(seq 1 200); do redis-cli -p "$PPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
    P() { "$RELOCK" -u "redis://127.0.0.1:$PPORT" -m legacy "$@"; }
    same=0
    for try in 1 2 3 4 5; do
        k="brk-adopt-$try"
        expect 0 "2.0 adopted: acquire" -- P acquire -t 10s "$k"
        read -r VO FO _ <"$DIR/out"
        expect 0 "2.0 adopted: break" -- P break "$k"
        expect 0 "2.0 adopted: another client acquires" -- P acquire -t 10s "$k"
        read -r VN FN _ <"$DIR/out"
        if [ "$VN" = "$VO" ]; then same=1; break; fi
    done
    check "2.0 adopted: the new holder wrote the same timestamp within 5 tries" -- [ "$same" = 1 ]
    expect 3 "2.0 adopted: the broken holder's release" -- P release "$k" "$VO" "$FO"
    check "2.0 adopted: release says lost: $(cat "$DIR/err")" -- err_has "lock lost"
    check "2.0 adopted: the new holder's lock is intact" -- [ "$(rcli GET "$k")" = "$VN" ]
    expect 3 "2.0 adopted: the broken holder's extend" -- P extend -t 10s "$k" "$VO" "$FO"
    check "2.0 adopted: extend says lost: $(cat "$DIR/err")" -- err_has "lock lost"
    check "2.0 adopted: the new holder's lock is unchanged" -- [ "$(rcli GET "$k")" = "$VN" ]
    expect 0 "2.0 adopted: the new holder releases" -- P release "$k" "$VN" "$FN"
    check "2.0 adopted: released" -- [ "$(rcli EXISTS "$k")" = 0 ]
    expect 0 "2.0 adopted: acquire after the break" -- P acquire -t 10s "$k"
    read -r VA FA _ <"$DIR/out"
    expect 0 "2.0 adopted: extend, nothing broken" -- P extend -t 10s "$k" "$VA" "$FA"
    read -r VA2 _ <"$DIR/out"
    expect 0 "2.0 adopted: release, nothing broken" -- P release "$k" "$VA2" "$FA"
    kill "$PPID_" 2>/dev/null
    wait "$PPID_" 2>/dev/null

    # The 2.0 window: the value changes between the GET and the MULTI.
    # Every reply through the proxy is delayed 300 ms; MONITOR on the real
    # server shows the break's first GET, and another value is written
    # directly at once.  The transaction's GET sees it, so the break
    # reports exit 3 and puts the new value back.
    PPORT=$(free_port)
    "$PROXY" --upstream "127.0.0.1:$PORT" --listen "$PPORT" --personality 2.0 --delay-ms 300 >/dev/null &
    PPID_=$!
    PIDS+=($PPID_)
    for _ in $(seq 1 200); do redis-cli -p "$PPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
    rcli SET brk-win 1700000000 >/dev/null
    redis-cli -p "$PORT" MONITOR >"$DIR/monitor" 2>/dev/null &
    MON=$!
    PIDS+=($MON)
    sleep 0.2
    # --force: straight to the library's compare-and-delete, without the
    # look that judges whether the value is a lock (its GET would be the
    # one MONITOR sees first).
    "$RELOCK" -u "redis://127.0.0.1:$PPORT" -m legacy break brk-win --if-value 1700000000 --force \
        >"$DIR/out" 2>"$DIR/err" &
    BRK=$!
    seen=0
    for _ in $(seq 1 600); do
        if grep -q '"GET" "brk-win"' "$DIR/monitor"; then seen=1; break; fi
        sleep 0.01
    done
    rcli SET brk-win 1700000999 >/dev/null
    wait "$BRK"
    code=$?
    kill "$MON" 2>/dev/null
    check "2.0 window: the break's GET was seen" -- [ "$seen" = 1 ]
    check "2.0 window: exit $code, expected 3 ($(cat "$DIR/err"))" -- [ "$code" -eq 3 ]
    check "2.0 window: message: $(cat "$DIR/err")" -- err_has "the key changed just before the delete"
    check "2.0 window: the new value was put back" -- [ "$(rcli GET brk-win)" = 1700000999 ]
    kill "$PPID_" 2>/dev/null
    wait "$PPID_" 2>/dev/null
else
    bad "no compat proxy given: the old-server paths were not tested"
fi

echo "cli_break: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
