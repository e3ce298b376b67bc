#!/usr/bin/env bash
# Who holds a lock: the owner record the commands write by default, and
# how relock inspect shows it, against a real redis-server:
#   - acquire names its caller (this shell): pid and command line;
#   - --owner TEXT replaces the command line;
#   - run names itself, its command's pid, the host, the start time and
#     the command line (cut to 128 bytes);
#   - extend rewrites the record for its caller;
#   - inspect: times a person reads, --json with exact numbers and the
#     owner fields;
#   - owner_info = false in a configuration file turns it off;
#   - bad --owner texts are refused with one line.
#   test_owner.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_owner.sh PATH/TO/relock}
. "$(dirname "$0")/lib.sh"
matches() { [[ $1 =~ $2 ]]; }
has() { grep -q -- "$1" "$2"; }
lacks() { ! grep -q -- "$1" "$2"; }
cli_dir owner
start_redis
R() { "$RELOCK" -m modern "$@"; }
rcli() { redis-cli -p "$PORT" "$@"; }
HOST=$(hostname)
ISO='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z'
json_field() { $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get(sys.argv[2], "<absent>"))' "$@"; }

# --- 1. acquire names its caller: this shell, which holds the lock now
R acquire -t 60s o-acq >"$DIR/acq"
read -r value fence _ <"$DIR/acq"
R inspect o-acq >"$DIR/out"
check "acquire: the owner line names this shell ($(cat "$DIR/out"))" -- \
    grep -Eq "^owner:   host=$HOST pid=$$ at=$ISO cmd=([^ ]*/)?bash .*test_owner.sh" "$DIR/out"
check "acquire: ttl as a person reads it ($(grep ttl: "$DIR/out"))" -- \
    grep -Eq "^ttl:     (59|60)\.[0-9] s \(the key ends $ISO\)$" "$DIR/out"
R inspect --json o-acq >"$DIR/json"
check "acquire json: pttl_ms exact ($(cat "$DIR/json"))" -- \
    matches "$(json_field "$DIR/json" pttl_ms)" '^(59|60)[0-9]{3}$'
check "acquire json: owner_pid is this shell" -- [ "$(json_field "$DIR/json" owner_pid)" = "$$" ]
check "acquire json: owner_pid is a number" -- has "\"owner_pid\":$$," "$DIR/json"
check "acquire json: owner_host" -- [ "$(json_field "$DIR/json" owner_host)" = "$HOST" ]
check "acquire json: owner_at" -- matches "$(json_field "$DIR/json" owner_at)" "^$ISO$"
check "acquire json: owner_cmd" -- matches "$(json_field "$DIR/json" owner_cmd)" "test_owner.sh"
check "acquire json: owner, the whole record" -- \
    matches "$(json_field "$DIR/json" owner)" "^host=$HOST pid=$$ at=$ISO cmd="

# extend rewrites the record for the caller too (its at= is then the time
# of the extend: the lock is adopted from VALUE), so pid and cmd are
# compared.
R extend -t 60s o-acq "$value" "$fence" >/dev/null
R inspect --json o-acq >"$DIR/json"
check "extend: owner_pid still this shell ($(cat "$DIR/json"))" -- \
    [ "$(json_field "$DIR/json" owner_pid)" = "$$" ]
check "extend: owner_cmd still this script" -- matches "$(json_field "$DIR/json" owner_cmd)" "test_owner.sh"
R release o-acq "$value" "$fence"
check "release: the owner record is gone" -- [ "$(rcli exists '{o-acq} relock:owner')" = 0 ]
R inspect --json o-acq >"$DIR/json"
check "release: inspect shows no owner ($(cat "$DIR/json"))" -- lacks owner "$DIR/json"

# A script's acquire: the calling process is that script's shell.
bash -c "\"$RELOCK\" -m modern acquire o-script >/dev/null; echo \$\$ >\"$DIR/script.pid\"" 
R inspect --json o-script >"$DIR/json"
check "script: owner_pid is the script's shell ($(cat "$DIR/json"))" -- \
    [ "$(json_field "$DIR/json" owner_pid)" = "$(cat "$DIR/script.pid")" ]

# --- 2. --owner TEXT
R acquire --owner "deploy #42 by alice" o-note >/dev/null
R inspect o-note >"$DIR/out"
check "--owner: the owner line ($(cat "$DIR/out"))" -- \
    grep -Eq "^owner:   host=$HOST pid=$$ at=$ISO note=deploy #42 by alice$" "$DIR/out"
R inspect --json o-note >"$DIR/json"
check "--owner json: owner_note" -- [ "$(json_field "$DIR/json" owner_note)" = "deploy #42 by alice" ]
check "--owner json: no owner_cmd" -- [ "$(json_field "$DIR/json" owner_cmd)" = "<absent>" ]

# --- 3. run: relock's pid, the command's pid, host, start time, command
"$RELOCK" -m modern run -t 30s o-run -- sh -c "echo \$\$ >$DIR/cmd.pid; exec sleep 60" >/dev/null 2>"$DIR/err" &
RUN=$!
PIDS+=("$RUN")
check "run: the command started" -- wait_for test -s "$DIR/cmd.pid"
CMD=$(cat "$DIR/cmd.pid")
# The record names the command once it runs: wait for it.
cmd_named() { R inspect --json o-run >"$DIR/json" && has "\"owner_cmd_pid\":$CMD," "$DIR/json"; }
check "run: owner_cmd_pid is the command ($CMD)" -- wait_for cmd_named
check "run: owner_pid is relock ($RUN: $(cat "$DIR/json"))" -- [ "$(json_field "$DIR/json" owner_pid)" = "$RUN" ]
check "run: owner_host" -- [ "$(json_field "$DIR/json" owner_host)" = "$HOST" ]
check "run: owner_at" -- matches "$(json_field "$DIR/json" owner_at)" "^$ISO$"
check "run: owner_cmd is the command line" -- \
    [ "$(json_field "$DIR/json" owner_cmd)" = "sh -c echo \$\$ >$DIR/cmd.pid; exec sleep 60" ]
R inspect o-run >"$DIR/out"
check "run: the owner line ($(cat "$DIR/out"))" -- \
    grep -Eq "^owner:   host=$HOST pid=$RUN at=$ISO cmd_pid=$CMD cmd=sh -c echo" "$DIR/out"
kill "$RUN"
wait "$RUN"
check "run: ended, the owner record is gone" -- [ "$(rcli exists '{o-run} relock:owner')" = 0 ]

# A long command line is cut to 128 bytes, ending in "...".
long=$(printf 'x%.0s' $(seq 1 300))
"$RELOCK" -m modern run -t 30s o-long -- sh -c "echo \$\$ >$DIR/long.pid; exec sleep 60" "$long" >/dev/null 2>&1 &
RUN=$!
PIDS+=("$RUN")
check "long: the command started" -- wait_for test -s "$DIR/long.pid"
CMD=$(cat "$DIR/long.pid")
long_named() { R inspect --json o-long >"$DIR/json" && has "\"owner_cmd_pid\":$CMD," "$DIR/json"; }
check "long: named" -- wait_for long_named
cmdline=$(json_field "$DIR/json" owner_cmd)
check "long: cut to 128 bytes (${#cmdline})" -- [ "${#cmdline}" -eq 128 ]
check "long: ends in ..." -- matches "$cmdline" '^sh -c echo .*xxx\.\.\.$'
kill "$RUN"
wait "$RUN"

# run --owner: the text replaces the command line; the pids stay.
"$RELOCK" -m modern run -t 30s --owner "nightly backup" o-rnote -- sh -c "echo \$\$ >$DIR/rnote.pid; exec sleep 60" >/dev/null 2>&1 &
RUN=$!
PIDS+=("$RUN")
check "run --owner: started" -- wait_for test -s "$DIR/rnote.pid"
CMD=$(cat "$DIR/rnote.pid")
rnote_named() { R inspect --json o-rnote >"$DIR/json" && has "\"owner_cmd_pid\":$CMD," "$DIR/json"; }
check "run --owner: cmd_pid named" -- wait_for rnote_named
check "run --owner: owner_note ($(cat "$DIR/json"))" -- [ "$(json_field "$DIR/json" owner_note)" = "nightly backup" ]
kill "$RUN"
wait "$RUN"

# --- 4. owner_info = false in a configuration file turns it off
printf 'relock = {\n  owner_info = false;\n};\n' >"$DIR/off.conf"
"$RELOCK" -c "$DIR/off.conf" -m modern acquire o-off >/dev/null
check "off: no owner record written" -- [ "$(rcli exists '{o-off} relock:owner')" = 0 ]
R inspect o-off >"$DIR/out"
check "off: inspect shows no owner line ($(cat "$DIR/out"))" -- lacks "^owner:" "$DIR/out"
R inspect --json o-off >"$DIR/json"
check "off: inspect --json has no owner field" -- lacks owner "$DIR/json"
# And a file that does not name it leaves the command's default, on.
printf 'relock = {\n  ttl_ms = 20000;\n};\n' >"$DIR/plain.conf"
"$RELOCK" -c "$DIR/plain.conf" -m modern acquire o-plain >/dev/null
check "plain file: the owner record written" -- [ "$(rcli exists '{o-plain} relock:owner')" = 1 ]

# --- 5. a legacy timestamp: the expiry as a date and a span
"$RELOCK" -m legacy acquire -t 30s o-ts >/dev/null
R inspect o-ts >"$DIR/out"
check "timestamp: expiry line ($(grep expiry: "$DIR/out"))" -- \
    grep -Eq "^expiry:  $ISO \(s, in [0-9]+\.[0-9] s\)$" "$DIR/out"
rcli set o-old 1000000000 >/dev/null
R inspect o-old >"$DIR/out"
check "timestamp: expired ($(grep expiry: "$DIR/out"))" -- \
    grep -Eq "^expiry:  2001-09-09T01:46:40Z \(s, expired [0-9]+d( [0-9]+h)? ago\)$" "$DIR/out"

# --- 6. bad --owner texts
bad_owner() {
    local what=$1 msg=$2
    shift 2
    "$@" >"$DIR/out" 2>"$DIR/err"
    local code=$?
    check "bad owner $what: exit 2 (exit $code)" -- [ "$code" -eq 2 ]
    check "bad owner $what: '$msg' ($(cat "$DIR/err"))" -- grep -qx -- "$msg" "$DIR/err"
    check "bad owner $what: one line" -- [ "$(wc -l <"$DIR/err")" -eq 1 ]
}
bad_owner "empty" "relock: acquire: --owner: the text is empty" R acquire --owner "" o-bad
bad_owner "control" "relock: acquire: --owner: a control character at byte 1" \
    R acquire --owner "a$(printf '\t')b" o-bad
bad_owner "too long" "relock: run: --owner: 201 bytes, at most 200" \
    R run --owner "$(printf 'y%.0s' $(seq 1 201))" o-bad -- true
bad_owner "release" "relock: release: --owner is not an option of release (try relock release --help)" \
    R release --owner x o-bad 1
check "bad owner: nothing acquired" -- [ "$(rcli exists o-bad)" = 0 ]

finish cli_owner
