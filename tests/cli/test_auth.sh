#!/usr/bin/env bash
# The relock command against a password-protected redis-server with ACL
# users: credentials from -u, $RELOCK_URL and a configuration file; every
# command works with them; a missing or wrong password is exit 2 with
# "AUTH ... refused" (or NOAUTH); TLS is refused cleanly; and no password
# ever appears on stdout or stderr of any relock command, whatever fails.
#   test_auth.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_auth.sh PATH/TO/relock}
PY=/usr/bin/python3

PASS=Pw-cli-0e4b7d21             # requirepass (the default user)
ALICE=Alice-cli-93c5a0f8         # user alice: ~* +@all (no pub/sub channels)
BOB='b@b/o:b-cli-6a2d'           # user bob: ~* &* +@all
BOB_URL='b%40b%2Fo%3Ab-cli-6a2d'
WRONG=Wrong-cli-51f7c3e9
SECRETS=("$PASS" "$ALICE" "$BOB" "$BOB_URL" "$WRONG" "b@b/o")

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

DIR=$(mktemp -d /tmp/relock-auth-XXXXXX)
PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
    --daemonize no --logfile "$DIR/server.log" --requirepass "$PASS" \
    --user alice on ">$ALICE" '~*' '+@all' --user bob on ">$BOB" '~*' '&*' '+@all' &
SERVER=$!
cleanup() {
    kill "$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
for _ in $(seq 1 200); do
    [ "$(redis-cli -p "$PORT" --no-auth-warning -a "$PASS" ping 2>/dev/null)" = PONG ] && break
    sleep 0.05
done
rcli() { redis-cli -p "$PORT" --no-auth-warning -a "$PASS" "$@"; }
unset RELOCK_URL RELOCK_CONFIG

# Every output of every relock command run below is kept here, and
# searched for the passwords at the end.
ALL="$DIR/all-output"
: >"$ALL"

# expect CODE DESCRIPTION -- COMMAND...: runs it, checks the exit code and
# that every error is one line "relock: ...".
expect() {
    local want=$1 what=$2
    shift 3
    "$@" >"$DIR/out" 2>"$DIR/err"
    local got=$?
    cat "$DIR/out" "$DIR/err" >>"$ALL"
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
check() {
    local what=$1
    shift 2
    if "$@"; then ok; else bad "$what"; fi
}
err_has() { grep -qF -- "$1" "$DIR/err"; }

# every_command LABEL RELOCK-ARGS...: the whole command set with one way
# of giving the credentials.
every_command() {
    local label=$1
    shift
    local k="auth-$label"
    expect 0 "$label: probe" -- "$RELOCK" "$@" probe
    expect 0 "$label: probe --json" -- "$RELOCK" "$@" probe --json
    expect 0 "$label: acquire" -- "$RELOCK" "$@" acquire -t 30s "$k"
    local v f
    read -r v f _ <"$DIR/out"
    check "$label: the key holds the value" -- [ "$(rcli GET "$k")" = "$v" ]
    expect 1 "$label: acquire -n on the held lock" -- "$RELOCK" "$@" acquire -n "$k"
    expect 0 "$label: extend" -- "$RELOCK" "$@" extend -t 40s "$k" "$v" "$f"
    read -r v <"$DIR/out"
    expect 0 "$label: inspect" -- "$RELOCK" "$@" inspect "$k"
    expect 0 "$label: inspect --json" -- "$RELOCK" "$@" inspect --json "$k"
    expect 3 "$label: release with another value" -- "$RELOCK" "$@" release "$k" 1700000000 "$f"
    expect 0 "$label: release" -- "$RELOCK" "$@" release "$k" "$v" "$f"
    check "$label: released" -- [ "$(rcli EXISTS "$k")" = 0 ]
    expect 0 "$label: run" -- "$RELOCK" "$@" run -t 5s "$k" -- sh -c 'echo "ran $RELOCK_NAME"'
    expect 7 "$label: run, CMD's code" -- "$RELOCK" "$@" run "$k" -- sh -c 'exit 7'
    expect 0 "$label: scan" -- "$RELOCK" "$@" scan
    expect 0 "$label: scan --json" -- "$RELOCK" "$@" scan --json
    expect 0 "$label: acquire for break" -- "$RELOCK" "$@" acquire -t 30s "$k"
    read -r v f _ <"$DIR/out"
    expect 3 "$label: break --if-value, another value" -- "$RELOCK" "$@" break "$k" --if-value 1700000000
    expect 0 "$label: break --if-value" -- "$RELOCK" "$@" break "$k" --if-value "$v"
    expect 1 "$label: break, nothing there" -- "$RELOCK" "$@" break "$k"
    expect 0 "$label: acquire for break" -- "$RELOCK" "$@" acquire -t 30s "$k"
    expect 0 "$label: break" -- "$RELOCK" "$@" break "$k"
    check "$label: broken" -- [ "$(rcli EXISTS "$k")" = 0 ]
}

URL_PASS="redis://:$PASS@127.0.0.1:$PORT"
URL_ALICE="redis://alice:$ALICE@127.0.0.1:$PORT"
URL_BOB="redis://bob:$BOB_URL@127.0.0.1:$PORT"

# --- the credentials: -u, $RELOCK_URL, a file; each mode
every_command url-pass-modern -u "$URL_PASS" -m modern
every_command url-pass-bridge -u "$URL_PASS" -m bridge
every_command url-alice-modern -u "$URL_ALICE" -m modern
every_command url-alice-legacy -u "$URL_ALICE" -m legacy
every_command url-bob-modern -u "$URL_BOB" -m modern
export RELOCK_URL="$URL_ALICE"
every_command env-alice -m modern
unset RELOCK_URL
printf 'relock = { mode = "modern"; servers = ( { host = "127.0.0.1"; port = %d; username = "alice"; password = "%s"; } ); };\n' \
    "$PORT" "$ALICE" >"$DIR/alice.conf"
every_command file-alice -c "$DIR/alice.conf"
export RELOCK_CONFIG="$DIR/alice.conf"
every_command env-file-alice
unset RELOCK_CONFIG
printf 'relock = { mode = "bridge"; servers = ( { host = "127.0.0.1"; port = %d; password = "%s"; db = 2; } ); };\n' \
    "$PORT" "$PASS" >"$DIR/pass.conf"
expect 0 "file with password and db: acquire" -- "$RELOCK" -c "$DIR/pass.conf" acquire auth-db2
check "the key is in db 2" -- [ "$(rcli -n 2 EXISTS auth-db2)" = 1 ]

# --- a missing or wrong password: exit 2, a clear reason
for cmd in probe "acquire -n x" "release x 1700000000 1" "inspect x" "scan" "break x" "run x -- true"; do
    # shellcheck disable=SC2086
    expect 2 "wrong password: $cmd" -- "$RELOCK" -u "redis://:$WRONG@127.0.0.1:$PORT" $cmd
    check "wrong password: $cmd: message: $(cat "$DIR/err")" -- err_has "AUTH to 127.0.0.1:$PORT refused: WRONGPASS"
    # shellcheck disable=SC2086
    expect 2 "wrong user password: $cmd" -- "$RELOCK" -u "redis://alice:$WRONG@127.0.0.1:$PORT" $cmd
    check "wrong user password: $cmd: message" -- err_has "AUTH to 127.0.0.1:$PORT refused"
    # shellcheck disable=SC2086
    expect 2 "no password: $cmd" -- "$RELOCK" -u "redis://127.0.0.1:$PORT" $cmd
    check "no password: $cmd: message: $(cat "$DIR/err")" -- err_has "refused: NOAUTH"
done
printf 'relock = { servers = ( { host = "127.0.0.1"; port = %d; username = "alice"; password = "%s"; } ); };\n' \
    "$PORT" "$WRONG" >"$DIR/wrong.conf"
expect 2 "wrong password in a file" -- "$RELOCK" -c "$DIR/wrong.conf" probe
check "wrong password in a file: message" -- err_has "refused: WRONGPASS"

# --- bad URLs and unreachable servers carrying a password
FREE=$(free_port)
expect 2 "bad port" -- "$RELOCK" -u "redis://:$PASS@127.0.0.1:99999" probe
check "bad port message: $(cat "$DIR/err")" -- err_has "bad URL: the port must be a number from 1 to 65535"
expect 2 "no host" -- "$RELOCK" -u "redis://alice:$PASS@" acquire x
expect 2 "bad db" -- "$RELOCK" -u "redis://:$PASS@127.0.0.1:$PORT/x" inspect x
expect 2 "unclosed IPv6 bracket" -- "$RELOCK" -u "redis://:$PASS@[::1:6379" scan
expect 2 "not a redis URL" -- "$RELOCK" -u "http://:$PASS@127.0.0.1" break x
expect 2 "bad URL in the environment" -- env RELOCK_URL="redis://:$PASS@127.0.0.1:0" "$RELOCK" release x 1 1
expect 4 "unreachable, password in -u" -- "$RELOCK" -u "redis://alice:$PASS@127.0.0.1:$FREE" acquire -n x
check "unreachable message: $(cat "$DIR/err")" -- err_has "connect to 127.0.0.1:$FREE"
expect 4 "unreachable, password in the environment" -- env RELOCK_URL="redis://:$PASS@127.0.0.1:$FREE" "$RELOCK" run x -- true
expect 4 "unreachable: probe" -- "$RELOCK" -u "redis://:$PASS@127.0.0.1:$FREE" probe
expect 4 "unreachable: break" -- "$RELOCK" -u "redis://:$PASS@127.0.0.1:$FREE" break x --if-value 1
expect 2 "a mode that does not exist, with a password" -- "$RELOCK" -u "$URL_PASS" -m fast probe
expect 2 "an unknown command, with a password" -- "$RELOCK" -u "$URL_PASS" lock x

# --- TLS: refused cleanly, the version says what this build is
expect 2 "rediss:// is refused" -- "$RELOCK" -u "rediss://:$PASS@127.0.0.1:$PORT" probe
check "rediss:// message: $(cat "$DIR/err")" -- err_has "relock: bad URL: rediss:// (TLS) is not available in this build"
expect 2 "rediss:// in the environment" -- env RELOCK_URL="rediss://127.0.0.1:$PORT" "$RELOCK" acquire x
check "rediss:// message" -- err_has "TLS"
expect 0 "--version" -- "$RELOCK" --version
check "--version prints the version: $(cat "$DIR/out")" -- grep -Eq '^relock [0-9]+\.[0-9]+\.[0-9]+$' "$DIR/out"

# --- the passwords never appeared
check "outputs were collected" -- [ "$(wc -l <"$ALL")" -gt 100 ]
for s in "${SECRETS[@]}"; do
    if grep -qF -- "$s" "$ALL"; then
        bad "a password appears in relock's output: $(grep -F -- "$s" "$ALL" | head -3)"
    else
        ok
    fi
done

echo "cli_auth: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
