#!/usr/bin/env bash
# One surface for every command, through the real binary against a real
# redis-server:
#   - options after NAME; a long option for every short one; flock's
#     --nonblock and --wait; --timeout refused, saying -t is the lease;
#   - --json on every command, errors in JSON too; -q and -v (scan's too);
#   - durations as systemd writes them, -w infinity; a lease too short to be
#     of use refused with the reason;
#   - the configuration: a host holding a port caught at load with
#     FILE:LINE; the default file ($XDG_CONFIG_HOME/relock.conf), and an
#     empty RELOCK_CONFIG for none.
#   test_surface.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_surface.sh PATH/TO/relock}
. "$(dirname "$0")/lib.sh"
cli_dir surface
# No configuration of the machine's or the user's may leak in.
export XDG_CONFIG_HOME="$DIR/xdg"
start_redis
R() { "$RELOCK" -m modern "$@"; }
rcli() { redis-cli -p "$PORT" "$@"; }
json() { local e=$1; shift; $PY -c "import json,sys; d=json.loads(open(sys.argv[1]).readline()); sys.exit(0 if ($e) else 1)" "$@"; }
said() { grep -q -- "$1" "$DIR/err"; }
not() { ! "$@"; }

# --- options after NAME, long options, flock's spellings
expect 0 "acquire NAME -n" -- R acquire s-after -n
expect 1 "acquire NAME --nonblock on a held lock" -- R acquire s-after --nonblock
expect 1 "acquire --nb" -- R acquire --nb s-after
expect 1 "acquire --wait 300ms" -- R acquire --wait 300ms s-after
expect 0 "acquire --ttl 5s --quiet" -- R acquire --ttl 5s --quiet s-long
check "--ttl 5s is the lease (PTTL $(rcli PTTL s-long))" -- [ "$(rcli PTTL s-long)" -le 5000 ]
expect 2 "--timeout is refused" -- R acquire --timeout 5 s-to
check "--timeout: says -t is the lease: $(cat "$DIR/err")" -- said "-t, --ttl is the lease, not flock's --timeout"
R acquire --help >"$DIR/out"
check "--help says -t is not flock's --timeout" -- grep -q "not" "$DIR/out"
grep -q "flock's --timeout" "$DIR/out" && ok || bad "acquire --help: $(cat "$DIR/out")"
expect 2 "release --ttl: an option release lacks" -- R release --ttl 5s s-after x
check "named as written: $(cat "$DIR/err")" -- said "--ttl is not an option of release"

# --- durations as systemd writes them
expect 0 "-t 30sec" -- R acquire -t 30sec -n s-sec
read -r _ _ VALID <"$DIR/out"
check "-t 30sec: validity $VALID ms, under 30000" -- [ "$VALID" -gt 25000 -a "$VALID" -le 30000 ]
expect 0 "-t 5min -w infinity" -- R acquire -t 5min -w infinity s-min
read -r _ _ VALID <"$DIR/out"
check "-t 5min: validity $VALID ms" -- [ "$VALID" -gt 290000 ]
expect 2 "-t infinity is no lease" -- R acquire -t infinity s-inf
# A lease too short to be of use: refused with the reason, nothing held.
expect 2 "acquire -t 2ms" -- R acquire -t 2ms s-tiny
check "too short: the reason: $(cat "$DIR/err")" -- said "too short.*validity"
check "too short: not left held" -- [ "$(rcli EXISTS s-tiny)" = 0 ]
expect 2 "run -t 50ms" -- R run -t 50ms s-tiny -- true
check "run too short: $(cat "$DIR/err")" -- said "at least 100 ms"

# --- --json everywhere, errors in JSON
expect 1 "acquire --json on a held lock" -- R acquire --json -n s-after
check "busy in JSON: $(cat "$DIR/out")" -- json 'd["error"]["status"]=="RELOCK_BUSY" and d["error"]["exit_code"]==1 and "is held" in d["error"]["message"]' "$DIR/out"
# -q leaves out the "relock: …" line, never the --json object: a script
# that reads standard output always gets one.
expect 1 "acquire -q --json on a held lock" -- R acquire -q --json -n s-after
check "busy, -q, in JSON: $(cat "$DIR/out")" -- json 'd["error"]["status"]=="RELOCK_BUSY"' "$DIR/out"
check "busy, -q: nothing on stderr: $(cat "$DIR/err")" -- [ ! -s "$DIR/err" ]
expect 1 "acquire -q on a held lock" -- R acquire -q -n s-after
silent() { [ ! -s "$DIR/out" ] && [ ! -s "$DIR/err" ]; }
check "busy, -q, no --json: nothing at all: $(cat "$DIR/out" "$DIR/err")" -- silent
expect 3 "release -q --json of another value" -- R release -q --json s-after not-its-value
check "lost, -q, in JSON: $(cat "$DIR/out")" -- json 'd["error"]["status"]=="RELOCK_LOST" and d["error"]["exit_code"]==3' "$DIR/out"
check "lost, -q: nothing on stderr: $(cat "$DIR/err")" -- [ ! -s "$DIR/err" ]
expect 2 "usage error in JSON" -- R acquire --json
check "usage error in JSON: $(cat "$DIR/out")" -- json 'd["error"]["exit_code"]==2' "$DIR/out"
expect 4 "connect error in JSON" -- "$RELOCK" -u "redis://127.0.0.1:$(free_port)" probe --json
check "connect error in JSON: $(cat "$DIR/out")" -- json 'd["error"]["exit_code"]==4' "$DIR/out"
expect 0 "break --json" -- R break --json s-sec
check "break --json: $(cat "$DIR/out")" -- json 'd["name"]=="s-sec" and d["deleted"] is True' "$DIR/out"
expect 1 "break --json, nothing to delete" -- R break --json s-sec
check "break nothing, JSON: $(cat "$DIR/out")" -- json 'd["error"]["exit_code"]==1' "$DIR/out"
expect 0 "inspect --json" -- R inspect s-min --json
check "inspect --json: $(cat "$DIR/out")" -- json 'd["name"]=="s-min"' "$DIR/out"

# --- -q and -v
R acquire -n s-q >"$DIR/out"
read -r QV QF _ <"$DIR/out"
rcli SET s-q other >/dev/null
expect 3 "release -q, lost" -- R release -q s-q "$QV" "$QF"
check "release -q says nothing: $(cat "$DIR/err")" -- [ ! -s "$DIR/err" ]
rcli SET s-q 0123456789abcdef0123456789abcdef PX 20000 >/dev/null
expect 3 "release -v, lost" -- R release -v s-q "$QV" "$QF"
check "release -v says who holds it: $(cat "$DIR/err")" -- said "s-q is held: value 0123456789abcdef0123456789abcdef"
expect 0 "inspect -q, held" -- R inspect -q s-q
check "inspect -q prints nothing" -- [ ! -s "$DIR/out" ]
expect 1 "inspect -q, absent" -- R inspect -q s-none
expect 1 "break -q, nothing to delete" -- R break -q s-none
check "break -q says nothing: $(cat "$DIR/err")" -- [ ! -s "$DIR/err" ]
expect 0 "probe -q" -- R probe -q
check "probe -q prints nothing" -- [ ! -s "$DIR/out" ]

# --- scan: -q the verdict's exit code alone, -v the counts by node and by
# signature, errors in JSON (a database of its own: db 5)
S() { "$RELOCK" -u "redis://127.0.0.1:$PORT/5" "$@"; }
expect 1 "scan -q, no evidence yet" -- S scan -q
check "scan -q prints nothing: $(cat "$DIR/out")" -- [ ! -s "$DIR/out" -a ! -s "$DIR/err" ]
rcli -n 5 SET sq-legacy "$(( $(date +%s) + 600 ))" >/dev/null
rcli -n 5 SET sq-modern 0123456789abcdef0123456789abcdef PX 60000 >/dev/null
rcli -n 5 HSET sq-hash f v >/dev/null
expect 3 "scan --quiet, a live legacy lock: stay in bridge" -- S scan --quiet
check "scan --quiet prints nothing: $(cat "$DIR/out")" -- [ ! -s "$DIR/out" ]
expect 3 "scan -q --json" -- S scan -q --json
check "scan -q --json prints nothing: $(cat "$DIR/out")" -- [ ! -s "$DIR/out" ]
expect 0 "scan without -q: 0 whatever the verdict" -- S scan
expect 2 "scan -q -v" -- S scan -q -v
check "scan -q -v: $(cat "$DIR/err")" -- said "-q and -v exclude each other"
expect 2 "scan -q --keys" -- S scan -q --keys
check "scan -q --keys: $(cat "$DIR/err")" -- said "--keys lists keys: not with -q"
expect 0 "scan -v" -- S scan -v
check "scan -v: counts by node: $(cat "$DIR/out")" -- \
    grep -q "^  127.0.0.1:$PORT  3 keys: legacy 1, bridge 0, modern 1, stale 0, unknown 0, other 1$" "$DIR/out"
check "scan -v: signatures: $(cat "$DIR/out")" -- grep -q '^  ts-s: *1$' "$DIR/out"
check "scan -v: the walk's time" -- grep -q '^walk: *[0-9]* ms' "$DIR/out"
S scan >"$DIR/plain"
check "scan without -v: no counts by node" -- not grep -q "^  127.0.0.1:$PORT " "$DIR/plain"
expect 0 "scan --verbose --json" -- S scan --verbose --json
check "scan -v --json: counts_by_node: $(cat "$DIR/out")" -- \
    json 'd["counts_by_node"]["127.0.0.1:'"$PORT"'"]=={"legacy":1,"bridge":0,"modern":1,"stale":0,"unknown":0,"other_types":1} and d["walk_ms"]>=0' "$DIR/out"
expect 0 "scan --json" -- S scan --json
check "scan --json without -v: no counts_by_node" -- json '"counts_by_node" not in d' "$DIR/out"
expect 2 "scan usage error in JSON" -- S scan --json --limit 5
check "scan usage error in JSON: $(cat "$DIR/out")" -- json 'd["error"]["exit_code"]==2 and "--limit needs --keys" in d["error"]["message"]' "$DIR/out"
expect 4 "scan connect error in JSON" -- "$RELOCK" -u "redis://127.0.0.1:$(free_port)" scan -q --json
check "scan connect error in JSON, -q too: $(cat "$DIR/out")" -- json 'd["error"]["exit_code"]==4' "$DIR/out"

# --- the configuration
printf 'relock = {\n  servers = (\n    { host = "127.0.0.1:%s"; }\n  );\n};\n' "$PORT" >"$DIR/hp.conf"
expect 2 "a host holding a port" -- env -u RELOCK_URL "$RELOCK" -c "$DIR/hp.conf" probe
check "caught at load with FILE:LINE: $(cat "$DIR/err")" -- \
    said "hp.conf:3: servers: host \"127.0.0.1:$PORT\" holds a port: write host = \"127.0.0.1\"; port = $PORT;"
# An IPv6 address with a port, as a URL writes it: caught at load too.
printf 'relock = {\n  servers = (\n    { host = "[::1]:%s"; }\n  );\n};\n' "$PORT" >"$DIR/hp6.conf"
expect 2 "an IPv6 host in brackets with a port" -- env -u RELOCK_URL "$RELOCK" -c "$DIR/hp6.conf" probe
check "caught at load with FILE:LINE: $(cat "$DIR/err")" -- \
    said "hp6.conf:3: servers: host \"\[::1\]:$PORT\" holds a port: write host = \"::1\"; port = $PORT;"
# A quorum in a mode it cannot use: the refusal names the file's line.
printf 'relock = {\n  servers = ( { host = "127.0.0.1"; port = %s; },\n    { host = "127.0.0.1"; port = %s; db = 1; },\n    { host = "127.0.0.1"; port = %s; db = 2; } );\n  mode = "bridge";\n};\n' \
    "$PORT" "$PORT" "$PORT" >"$DIR/qm.conf"
expect 2 "quorum in bridge mode" -- env -u RELOCK_URL "$RELOCK" -c "$DIR/qm.conf" acquire s-qm
check "the mode's FILE:LINE: $(cat "$DIR/err")" -- said "qm.conf:5: servers: quorum over 3 servers uses modern values only"
expect 2 "quorum, -m auto: the servers' line" -- env -u RELOCK_URL "$RELOCK" -c "$DIR/qm.conf" -m auto acquire s-qm
check "the servers' FILE:LINE: $(cat "$DIR/err")" -- said "qm.conf:2: servers: quorum over 3 servers"
# The default file: $XDG_CONFIG_HOME/relock.conf, read without -c.
mkdir -p "$XDG_CONFIG_HOME"
printf 'relock = {\n  ttl_ms = 7000;\n  mode = "modern";\n};\n' >"$XDG_CONFIG_HOME/relock.conf"
expect 0 "the default file is read" -- "$RELOCK" acquire -n s-default
read -r _ _ VALID <"$DIR/out"
check "its ttl_ms = 7000 applies (validity $VALID)" -- [ "$VALID" -le 7000 -a "$VALID" -gt 5000 ]
expect 0 "RELOCK_CONFIG= (empty): no file" -- env RELOCK_CONFIG= "$RELOCK" -m modern acquire -n s-nofile
read -r _ _ VALID <"$DIR/out"
check "built-in ttl then (validity $VALID)" -- [ "$VALID" -gt 7000 ]
printf 'relock = { ttl_ms = "x"; };\n' >"$XDG_CONFIG_HOME/relock.conf"
expect 2 "a broken default file is an error, not skipped" -- "$RELOCK" acquire -n s-broken
check "named: $(cat "$DIR/err")" -- said "$XDG_CONFIG_HOME/relock.conf:1:"

# --- keys against names: inspect shows the key, --key takes one
unset RELOCK_CONFIG
printf 'relock = {\n  key_prefix = "lock:";\n  mode = "modern";\n};\n' >"$DIR/kp.conf"
K() { "$RELOCK" -c "$DIR/kp.conf" "$@"; }
expect 0 "prefix: acquire job" -- K acquire -t 30s job
read -r KV KF _ <"$DIR/out"
expect 0 "inspect job shows its key" -- K inspect job
check "key: line: $(cat "$DIR/out")" -- grep -q '^key: *lock:job$' "$DIR/out"
expect 0 "inspect --key lock:job" -- K inspect --key lock:job --json
check "--key reads the lock job: $(cat "$DIR/out")" -- json 'd["name"]=="job" and d["key"]=="lock:job" and d["value"]==sys.argv[2]' "$DIR/out" "$KV"
expect 0 "inspect lock:job (a name) is absent, said" -- K inspect lock:job
check "the key it read and --key named: $(cat "$DIR/err")" -- said 'key_prefix "lock:": the key read was lock:lock:job; relock inspect --key lock:job'
expect 2 "--key without the prefix" -- K inspect --key job
# The waiters: a second client waits on the release channel.
K acquire -w 20s job >/dev/null 2>&1 &
WAITER=$!
waiting() { K inspect --json job >"$DIR/w.json" && json 'd["waiters"]==1' "$DIR/w.json"; }
check "inspect counts the waiter" -- wait_for waiting
# The first acquisition survives an extend (whose at= is now).
first=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["since"])' "$DIR/w.json")
sleep 1.1
expect 0 "extend" -- K extend -t 30s job "$KV"
expect 0 "inspect after extend" -- K inspect --json job
check "since is still the first acquisition ($first): $(cat "$DIR/out")" -- json 'd["since"]==sys.argv[2] and d["owner_at"]!=sys.argv[2]' "$DIR/out" "$first"
expect 0 "break --key lock:job" -- K break --key lock:job
wait "$WAITER"
expect 0 "break the waiter's lock too" -- K break job
# A record left beside an absent key (as a holder that died mid-way leaves
# one) is no holder.
rcli SET '{lock:job} relock:owner' 'host=gone pid=1 at=2026-01-01T00:00:00Z cmd=dead' EX 60 >/dev/null
expect 0 "inspect: absent key, a record left" -- K inspect --json job
check "not presented as the owner: $(cat "$DIR/out")" -- json '"owner" not in d and d["owner_left"].startswith("host=gone")' "$DIR/out"

finish cli_surface
