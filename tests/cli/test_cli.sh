#!/usr/bin/env bash
# The relock command line against a real redis-server: every exit code of
# docs/design.md §12.3 produced by a real case, the output formats, and run's
# environment, signal forwarding and loss handling.
#   test_cli.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_cli.sh PATH/TO/relock}
PY=/usr/bin/python3

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

DIR=$(mktemp -d /tmp/relock-cli-XXXXXX)
PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
    --daemonize no --logfile "$DIR/server.log" &
SERVER=$!
cleanup() {
    kill "$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
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
        bad "$what: exit $got, expected $want; stderr: $(cat "$DIR/err")"
        return
    fi
    if [ -s "$DIR/err" ] && ! grep -q '^relock: ' "$DIR/err"; then
        bad "$what: stderr not in 'relock: what: why' form: $(cat "$DIR/err")"
        return
    fi
    ok
}

# --- 0: success, and the output formats
expect 0 "acquire" -- R acquire -t 10s cli-a
read -r VALUE FENCE VALID <"$DIR/out"
[[ "$VALUE" =~ ^[0-9a-f]{32}$ ]] && ok || bad "acquire printed value '$VALUE'"
[[ "$FENCE" =~ ^[0-9]+$ ]] && ok || bad "acquire printed fence '$FENCE'"
{ [ "$VALID" -gt 9000 ] && [ "$VALID" -le 10000 ]; } && ok || bad "validity '$VALID' not in (9000, 10000]"
[ "$(rcli GET cli-a)" = "$VALUE" ] && ok || bad "key does not hold the printed value"
expect 0 "extend" -- R extend -t 20s cli-a "$VALUE" "$FENCE"
[ "$(cat "$DIR/out")" = "$VALUE" ] && ok || bad "extend printed '$(cat "$DIR/out")'"
pttl=$(rcli PTTL cli-a)
[ "$pttl" -gt 10000 ] && ok || bad "extend did not lengthen the TTL (pttl $pttl)"
expect 0 "inspect" -- R inspect cli-a
grep -q "format:  token" "$DIR/out" && ok || bad "inspect: $(cat "$DIR/out")"
expect 0 "inspect --json" -- R inspect --json cli-a
grep -q "\"format\":\"token\",\"value\":\"$VALUE\"" "$DIR/out" && ok || bad "inspect --json: $(cat "$DIR/out")"
# "X.0" (redis-py 2.7: a whole clock's time as a float) is held as the
# integer X is, until X + 1 s.
V=$(( $(date +%s) + 100 ))
rcli SET cli-zf "$V.0" >/dev/null
expect 0 "inspect --json, a fraction of zero" -- R inspect --json cli-zf
after=$(date +%s%3N)
left=$(sed -n 's/.*"expires_in_ms":\(-\{0,1\}[0-9]*\).*/\1/p' "$DIR/out")
[ -n "$left" ] && [ "$left" -ge $(( (V + 1) * 1000 - after )) ] && ok \
    || bad "inspect: $V.0 expires in '$left' ms, before $(( V + 1 )) s: $(cat "$DIR/out")"
rcli DEL cli-zf >/dev/null
expect 0 "probe --json" -- R probe --json
grep -q '"mode":"modern"' "$DIR/out" && ok || bad "probe --json: $(cat "$DIR/out")"
expect 0 "--help" -- "$RELOCK" --help
expect 0 "run --help" -- "$RELOCK" run --help
grep -q "usage: relock run" "$DIR/out" && ok || bad "run --help printed no usage"
expect 0 "--version" -- "$RELOCK" --version

# --- 1: not acquired
expect 1 "acquire -n on a held lock" -- R acquire -n cli-a
grep -q "held" "$DIR/err" && ok || bad "busy message: $(cat "$DIR/err")"
start=$(date +%s%N)
expect 1 "acquire -w 300ms on a held lock" -- R acquire -w 300ms cli-a
el=$((($(date +%s%N) - start) / 1000000))
[ "$el" -ge 300 ] && ok || bad "-w 300ms gave up after ${el} ms"
expect 1 "run -n on a held lock" -- R run -n cli-a -- true
expect 7 "run -n -E 7 on a held lock" -- R run -n -E 7 cli-a -- true

# --- 3: lost
expect 0 "release" -- R release cli-a "$VALUE" "$FENCE"
expect 3 "release again" -- R release cli-a "$VALUE" "$FENCE"
grep -q "lost" "$DIR/err" && ok || bad "lost message: $(cat "$DIR/err")"
expect 0 "acquire b" -- R acquire -t 10s cli-b
read -r VB _ _ <"$DIR/out"
expect 3 "release with another value" -- R release cli-b 0123456789abcdef0123456789abcdef
expect 3 "extend with another value" -- R extend cli-b 0123456789abcdef0123456789abcdef
[ "$(rcli GET cli-b)" = "$VB" ] && ok || bad "a failed release touched the holder's key"
# run whose lock is deleted behind its back: CMD is stopped, exit 3.
"$RELOCK" -m modern run -t 600ms cli-run -- sleep 30 >"$DIR/out" 2>"$DIR/err" &
RUNPID=$!
for _ in $(seq 1 100); do [ "$(rcli EXISTS cli-run)" = 1 ] && break; sleep 0.05; done
rcli DEL cli-run >/dev/null
start=$(date +%s%N)
wait "$RUNPID"
code=$?
el=$((($(date +%s%N) - start) / 1000000))
[ "$code" -eq 3 ] && ok || bad "run with a deleted lock exited $code, expected 3"
[ "$el" -lt 20000 ] && ok || bad "run with a deleted lock took ${el} ms to notice"
grep -q "lock lost while CMD was running" "$DIR/err" && ok || bad "run loss message: $(cat "$DIR/err")"

# --- run: CMD's own code, its environment, renewal, signals
expect 5 "run passes CMD's exit code" -- R run cli-r -- sh -c 'exit 5'
expect 0 "run gives CMD its environment" -- R run cli-env -- sh -c 'echo "$RELOCK_NAME $RELOCK_VALUE $RELOCK_FENCE"'
read -r n v f <"$DIR/out"
{ [ "$n" = cli-env ] && [[ "$v" =~ ^[0-9a-f]{32}$ ]] && [[ "$f" =~ ^[0-9]+$ ]]; } && ok || bad "run env: $(cat "$DIR/out")"
[ "$(rcli EXISTS cli-env)" = 0 ] && ok || bad "run did not release its lock"
# A 1 s lease held through a 3 s command: renewal keeps it the whole time.
# CMD marks its end; a key found missing before that mark is a failure.
"$RELOCK" -m modern run -t 1s cli-long -- sh -c "sleep 3; touch '$DIR/long-done'" >"$DIR/out" 2>"$DIR/err" &
RUNPID=$!
for _ in $(seq 1 100); do [ "$(rcli EXISTS cli-long)" = 1 ] && break; sleep 0.05; done
held=1
checks=0
for _ in $(seq 1 100); do
    ex=$(rcli EXISTS cli-long)
    [ -e "$DIR/long-done" ] && break
    checks=$((checks + 1))
    [ "$ex" = 1 ] || held=0
    sleep 0.1
done
[ "$checks" -ge 10 ] || held=0
wait "$RUNPID"
code=$?
{ [ "$code" -eq 0 ] && [ "$held" -eq 1 ]; } && ok || bad "run -t 1s -- sleep 3: exit $code, held throughout: $held"
# SIGTERM to relock reaches CMD; relock exits with CMD's code.
"$RELOCK" -m modern run cli-sig -- sh -c 'trap "exit 42" TERM; while :; do sleep 0.05; done' >"$DIR/out" 2>"$DIR/err" &
RUNPID=$!
for _ in $(seq 1 100); do [ "$(rcli EXISTS cli-sig)" = 1 ] && break; sleep 0.05; done
sleep 0.2
kill -TERM "$RUNPID"
wait "$RUNPID"
code=$?
[ "$code" -eq 42 ] && ok || bad "SIGTERM forwarding: exit $code, expected 42"
[ "$(rcli EXISTS cli-sig)" = 0 ] && ok || bad "lock left behind after a signalled run"
expect 127 "run of a missing command" -- R run cli-x -- /nonexistent/cmd

# --- 2: usage and configuration
# The last command's stderr is one line containing $1.
one_line_err() {
    [ "$(wc -l <"$DIR/err")" -eq 1 ] && grep -qF -- "$1" "$DIR/err" && ok ||
        bad "expected one line with \"$1\": $(cat "$DIR/err")"
}
expect 2 "no command" -- "$RELOCK"
expect 2 "unknown command" -- "$RELOCK" frobnicate
expect 2 "bad duration" -- R acquire -t 10x cli-c
grep -q 'unknown unit' "$DIR/err" && ok || bad "bad duration message: $(cat "$DIR/err")"
expect 2 "negative duration" -- R acquire -t -1s cli-c
expect 2 "zero TTL" -- R acquire -t 0 cli-c
expect 2 "a directory as the configuration file" -- "$RELOCK" -c "$DIR" probe
one_line_err "not a configuration file (a directory)"
printf 'relock = {\n  ttl_ms = 30s;\n};\n' >"$DIR/dur.conf"
expect 2 "a duration with a unit in the file" -- "$RELOCK" -c "$DIR/dur.conf" probe
one_line_err "ttl_ms takes whole milliseconds (ttl_ms = 30000)"
expect 2 "a compound without its last unit" -- R acquire -t 1m30 cli-c
one_line_err "a unit is needed after 30"
expect 2 "units out of order" -- R acquire -t 30s1m cli-c
# A plain number is seconds, as for flock -w and timeout(1).
expect 0 "-t 60 is a minute" -- R acquire -t 60 cli-dur
read -r DV _ DVAL <"$DIR/out"
{ [ "$DVAL" -gt 50000 ] && [ "$DVAL" -le 60000 ]; } && ok || bad "-t 60: validity $DVAL ms, not near a minute"
start=$(date +%s%N)
expect 1 "-w 1 on a held lock waits a second, then gives up" -- R acquire -w 1 cli-dur
el=$((($(date +%s%N) - start) / 1000000))
[ "$el" -ge 900 ] && ok || bad "-w 1 waited ${el} ms, not a second"
expect 1 "-w 0.2 waits a fraction of a second" -- R acquire -w 0.2 cli-dur
expect 0 "release" -- R release cli-dur "$DV"
expect 0 "compound TTL" -- R acquire -t 1m30s cli-dur
read -r DV _ DVAL <"$DIR/out"
{ [ "$DVAL" -gt 80000 ] && [ "$DVAL" -le 90000 ]; } && ok || bad "-t 1m30s: validity $DVAL ms"
expect 0 "release" -- R release cli-dur "$DV"
expect 2 "-w with -n" -- R acquire -w 1s -n cli-c
expect 2 "unknown option" -- R acquire -x cli-c
one_line_err "unknown option -x"
expect 2 "option without its value" -- R acquire -t
one_line_err "option -t needs a value"
expect 2 "unknown global option" -- "$RELOCK" -q acquire cli-c
one_line_err "unknown option -q (try relock --help)"
expect 2 "global option without its value" -- "$RELOCK" -c
one_line_err "option -c needs a value"
expect 2 "unknown scan option" -- R scan -x
one_line_err "scan: unknown option -x (try relock scan --help)"
expect 2 "scan --match without its value" -- R scan --match
one_line_err "scan: option --match needs a value"
expect 2 "TTL over a year" -- R acquire -t 1000000h cli-c
expect 2 "missing NAME" -- R acquire
expect 2 "bad name" -- R acquire "with space"
expect 2 "name whose fence key could not share its Cluster slot" -- R acquire "a}b"
expect 2 "bad mode" -- "$RELOCK" -m fast acquire cli-c
expect 2 "bad fence" -- R release cli-c "$VALUE" notanumber
expect 2 "bad -E" -- R run -E 300 cli-c -- true
expect 2 "missing config file" -- "$RELOCK" -c "$DIR/none.conf" acquire cli-c
grep -q "none.conf: cannot open" "$DIR/err" && ok || bad "missing file message: $(cat "$DIR/err")"
printf 'relock = {\n  mode = "modern";\n  tll_ms = 5;\n};\n' >"$DIR/bad.conf"
expect 2 "bad config line" -- "$RELOCK" -c "$DIR/bad.conf" acquire cli-c
grep -q "bad.conf:3: unknown setting \"tll_ms\"" "$DIR/err" && ok || bad "config message: $(cat "$DIR/err")"
RELOCK_CONFIG=$DIR/bad.conf "$RELOCK" acquire cli-c >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "RELOCK_CONFIG is not read"
expect 2 "bad URL" -- "$RELOCK" -u "redis://h:99999" acquire cli-c
# auto next to possible legacy clients picks bridge: a timestamp with a TTL.
expect 0 "auto mode picks bridge" -- "$RELOCK" acquire -t 5s cli-auto
read -r VA FA _ <"$DIR/out"
[[ "$VA" =~ ^[0-9]{10}$ ]] && ok || bad "auto (bridge) value '$VA' is not a timestamp"
[ "$(rcli PTTL cli-auto)" -gt 0 ] && ok || bad "bridge value has no TTL"
expect 0 "bridge release with fence" -- "$RELOCK" release cli-auto "$VA" "$FA"
expect 0 "probe says why" -- "$RELOCK" probe
grep -q "legacy_clients = true" "$DIR/out" && ok || bad "probe reason: $(cat "$DIR/out")"

# --- 4: server unreachable or protocol error
DEAD=$(free_port)
expect 4 "unreachable server" -- "$RELOCK" -m modern -u "redis://127.0.0.1:$DEAD" acquire cli-c
grep -q "connect to 127.0.0.1:$DEAD" "$DIR/err" && ok || bad "unreachable message: $(cat "$DIR/err")"
rcli LPUSH cli-list x >/dev/null
expect 4 "release of a key of another type" -- R release cli-list 0123456789abcdef0123456789abcdef
grep -q "holds a list, not a lock" "$DIR/err" && ok || bad "wrong type message: $(cat "$DIR/err")"
expect 4 "acquire of a key of another type" -- R acquire -n cli-list
grep -q "holds a list, not a lock" "$DIR/err" && ok || bad "wrong type message: $(cat "$DIR/err")"
# A hash, in every mode: acquire, run, inspect and break say which type it
# holds, without the server's script noise, and leave it as it is.
rcli HSET cli-hash owner someone >/dev/null
for m in legacy bridge modern; do
    for cmd in "acquire -n" "run -n"; do
        if [ "$cmd" = "run -n" ]; then
            expect 4 "$m: run on a hash" -- "$RELOCK" -m "$m" run -n cli-hash -- touch "$DIR/ran"
        else
            expect 4 "$m: acquire on a hash" -- "$RELOCK" -m "$m" acquire -n cli-hash
        fi
        grep -q "^relock: ${cmd% -n}: lock cli-hash: the key cli-hash on 127.0.0.1:$PORT holds a hash, not a lock" "$DIR/err" \
            && ok || bad "$m $cmd on a hash: $(cat "$DIR/err")"
        grep -Eq "WRONGTYPE|script|@user" "$DIR/err" && bad "$m $cmd: server noise: $(cat "$DIR/err")" || ok
    done
done
[ ! -e "$DIR/ran" ] && ok || bad "run on a hash ran CMD"
expect 4 "inspect on a hash" -- R inspect cli-hash
grep -q "^relock: inspect: lock cli-hash: the key cli-hash on 127.0.0.1:$PORT holds a hash, not a lock" "$DIR/err" \
    && ok || bad "inspect on a hash: $(cat "$DIR/err")"
[ ! -s "$DIR/out" ] && ok || bad "inspect on a hash printed: $(cat "$DIR/out")"
expect 4 "break on a hash" -- R break cli-hash
grep -q "holds a hash, not a lock" "$DIR/err" && ok || bad "break on a hash: $(cat "$DIR/err")"
expect 4 "break --if-value on a hash" -- R break cli-hash --if-value someone
grep -q "^relock: break: lock cli-hash: the key cli-hash on 127.0.0.1:$PORT holds a hash, not a lock" "$DIR/err" \
    && ok || bad "break --if-value on a hash: $(cat "$DIR/err")"
expect 4 "break --force on a hash" -- R break cli-hash --force
grep -q "holds a hash, not a lock" "$DIR/err" && ok || bad "break --force on a hash: $(cat "$DIR/err")"
[ "$(rcli TYPE cli-hash)" = hash ] && [ "$(rcli HGET cli-hash owner)" = someone ] && [ "$(rcli HLEN cli-hash)" = 1 ] \
    && ok || bad "the hash was changed: $(rcli HGETALL cli-hash)"
rcli ZADD cli-zset 1 a >/dev/null
expect 4 "acquire on a sorted set" -- R acquire -n cli-zset
grep -q "holds a sorted set, not a lock" "$DIR/err" && ok || bad "sorted set: $(cat "$DIR/err")"

# --- habits: quiet and verbose, exit codes of one's choosing, --json,
# global options after the command, flock's -c form
expect 0 "holder for the habits" -- R acquire -t 30s cli-h
read -r HV HF _ <"$DIR/out"
expect 1 "-q: not acquired" -- R acquire -q -n cli-h
[ ! -s "$DIR/err" ] && ok || bad "-q said: $(cat "$DIR/err")"
expect 1 "run -q: not acquired" -- R run -q -n cli-h -- true
[ ! -s "$DIR/err" ] && ok || bad "run -q said: $(cat "$DIR/err")"
"$RELOCK" -m modern acquire -v -n cli-h >"$DIR/out" 2>"$DIR/err"
grep -q "cli-h is held: value $HV, fence $HF, its key ends in" "$DIR/err" && ok ||
    bad "-v names the holder: $(cat "$DIR/err")"
grep -q "waited" "$DIR/err" && ok || bad "-v says how long it waited: $(cat "$DIR/err")"
expect 2 "-q with -v" -- R acquire -q -v -n cli-h
expect 75 "--exit-busy" -- R acquire --exit-busy 75 -n cli-h
expect 75 "run -E" -- R run -E 75 -n cli-h -- true
expect 2 "--exit-lost out of range" -- R run --exit-lost 300 cli-h -- true
# The lock lost while CMD runs, with CMD exiting 3 itself: told apart.
"$RELOCK" -m modern run --exit-lost 13 -t 3s cli-lost13 -- sh -c 'sleep 20; exit 3' \
    >"$DIR/out" 2>"$DIR/err" &
LRUN=$!
for _ in $(seq 1 200); do [ "$(rcli EXISTS cli-lost13)" = 1 ] && break; sleep 0.05; done
R break cli-lost13 >/dev/null 2>&1
code=0
wait "$LRUN" || code=$?
[ "$code" -eq 13 ] && ok || bad "--exit-lost 13: exit $code ($(cat "$DIR/err"))"
expect 3 "CMD's own 3 passes through" -- R run --exit-lost 13 cli-own3 -- sh -c 'exit 3'
expect 42 "--exit-error" -- "$RELOCK" -u "redis://127.0.0.1:$(free_port)" acquire --exit-error 42 cli-e
# --json where a script reads the output; refused where it would be ignored.
expect 0 "acquire --json" -- R acquire --json -t 30s cli-j
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["name"]=="cli-j" and d["fence"]>0 and len(d["value"])==32 and d["validity_ms"]>0' "$DIR/out" && ok ||
    bad "acquire --json: $(cat "$DIR/out")"
JV=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["value"])' "$DIR/out")
expect 0 "extend --json" -- R extend --json -t 30s cli-j "$JV"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["value"]==sys.argv[2]' "$DIR/out" "$JV" && ok ||
    bad "extend --json: $(cat "$DIR/out")"
expect 0 "release --json" -- R release --json cli-j "$JV"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["released"] is True' "$DIR/out" && ok ||
    bad "release --json: $(cat "$DIR/out")"
# run --json: the acquisition as JSON on stderr (stdout is CMD's).
R run --json cli-j -- echo cmd-out >"$DIR/out" 2>"$DIR/err"
code=$?
[ "$code" -eq 0 ] && [ "$(cat "$DIR/out")" = cmd-out ] && ok || bad "run --json: exit $code, stdout $(cat "$DIR/out")"
$PY -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); assert d["name"]=="cli-j" and d["fence"]>0' "$DIR/err" && ok ||
    bad "run --json: stderr $(cat "$DIR/err")"
# Global options after the command's name.
expect 0 "probe -u URL" -- env -u RELOCK_URL "$RELOCK" probe -u "redis://127.0.0.1:$PORT"
expect 0 "release NAME VALUE -m MODE" -- env -u RELOCK_URL "$RELOCK" release cli-h "$HV" -u "redis://127.0.0.1:$PORT" -m modern
# flock's form: NAME -c 'shell command'.
expect 5 "run NAME -c" -- R run cli-c2 -c 'test "$RELOCK_NAME" = cli-c2 && exit 5'
expect 2 "run NAME -c without the command" -- R run cli-c2 -c

# --- scan --keys: the keys of each class, text and JSON, bounded by --limit
rcli SET sk-stale 1700000000 >/dev/null
rcli SET sk-live "$(($(date +%s) + 600))" >/dev/null
expect 0 "a live modern lock for scan" -- R acquire -t 60s sk-modern
rcli SET sk-app '{"user":42}' >/dev/null
rcli SET sk-bridge "$(($(date +%s) + 600))" EX 600 >/dev/null
rcli HSET sk-hash a 1 >/dev/null
for i in 1 2 3; do rcli SET "sk-old$i" 1600000000 >/dev/null; done
expect 0 "scan --keys" -- R scan --keys --match 'sk-*'
# The line after a class label holds its first key; the others follow,
# indented, until the next label.
keys_of() { awk -v c="  $1:" '$0 ~ /^  [a-z]+: / { on = (index($0, c) == 1) } on { print $NF }' \
    <(sed -n '/^keys:/,/^legacy seen:/{/^legacy seen:/!p}' "$DIR/out"); }
[ "$(keys_of stale | sort | tr '\n' ' ')" = "sk-old1 sk-old2 sk-old3 sk-stale " ] && ok ||
    bad "scan --keys: stale keys: $(keys_of stale | tr '\n' ' '); output: $(cat "$DIR/out")"
[ "$(keys_of legacy)" = sk-live ] && ok || bad "scan --keys: legacy keys: $(keys_of legacy)"
[ "$(keys_of modern)" = sk-modern ] && ok || bad "scan --keys: modern keys: $(keys_of modern)"
[ "$(keys_of bridge)" = sk-bridge ] && ok || bad "scan --keys: bridge keys: $(keys_of bridge)"
[ "$(keys_of unknown)" = sk-app ] && ok || bad "scan --keys: unknown keys: $(keys_of unknown)"
[ "$(keys_of other)" = sk-hash ] && ok || bad "scan --keys: other keys: $(keys_of other)"
grep -q "more, not listed" "$DIR/out" && bad "scan --keys: truncated below the default limit" || ok
grep -q "^  stale:     4  expired" "$DIR/out" && ok || bad "scan --keys: counts kept: $(cat "$DIR/out")"
expect 0 "scan without --keys lists none" -- R scan --match 'sk-*'
grep -q "^keys:" "$DIR/out" && bad "scan without --keys: $(cat "$DIR/out")" || ok
expect 0 "scan --keys --limit 2" -- R scan --keys --limit 2 --match 'sk-*'
[ "$(keys_of stale | grep -c '^sk-')" = 2 ] && ok || bad "--limit 2: stale keys: $(keys_of stale | tr '\n' ' ')"
grep -q "^             \.\.\. and 2 more, not listed$" "$DIR/out" && ok || bad "--limit 2: truncation not said: $(cat "$DIR/out")"
grep -q "^keys:        by class, at most 2 per class (--limit)$" "$DIR/out" && ok || bad "--limit 2: header: $(cat "$DIR/out")"
expect 0 "scan --keys --json" -- R scan --keys --json --match 'sk-*'
$PY - "$DIR/out" <<'PYEOF' && ok || bad "scan --keys --json: $(cat "$DIR/out")"
import json, sys
d = json.load(open(sys.argv[1]))
k = d["keys"]
assert sorted(k["stale"]) == ["sk-old1", "sk-old2", "sk-old3", "sk-stale"], k
assert k["legacy"] == ["sk-live"] and k["modern"] == ["sk-modern"], k
assert k["bridge"] == ["sk-bridge"] and k["unknown"] == ["sk-app"] and k["other_types"] == ["sk-hash"], k
assert d["keys_limit"] == 100 and d["keys_truncated"] is False, d
for c in k:
    assert len(k[c]) == d["counts"][c], (c, k[c], d["counts"])
PYEOF
expect 0 "scan --keys --json --limit 1" -- R scan --keys --json --limit 1 --match 'sk-*'
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["keys"]["stale"]) == 1 and d["counts"]["stale"] == 4 and d["keys_truncated"] is True and d["keys_limit"] == 1' "$DIR/out" && ok ||
    bad "scan --keys --json --limit 1: $(cat "$DIR/out")"
expect 0 "scan --json without --keys has no keys" -- R scan --json --match 'sk-*'
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "keys" not in d' "$DIR/out" && ok || bad "scan --json: $(cat "$DIR/out")"
expect 2 "--limit without --keys" -- R scan --limit 5
one_line_err "scan: --limit needs --keys"
expect 2 "--limit 0" -- R scan --keys --limit 0
one_line_err "scan: --limit: '0' is not a number of keys from 1 to 1000000"
expect 2 "--limit not a number" -- R scan --keys --limit 5x
# Global options after scan's --limit value are still found.
expect 0 "scan --keys --limit N -u URL" -- env -u RELOCK_URL "$RELOCK" scan --keys --limit 3 --match 'sk-*' -u "redis://127.0.0.1:$PORT"
# A listed key is what break takes: the stale one goes, the unknown one
# needs --force, the hash never.
expect 0 "break a listed stale key" -- R break sk-stale
expect 4 "break a listed unknown key" -- R break sk-app
[ "$(rcli GET sk-app)" = '{"user":42}' ] && ok || bad "sk-app was deleted without --force"
expect 4 "break --force a listed hash" -- R break sk-hash --force
[ "$(rcli HGET sk-hash a)" = 1 ] && ok || bad "sk-hash changed"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
