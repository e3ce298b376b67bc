# Helpers of the command-line tests, sourced by each tests/cli/test_*.sh:
#   ok, bad, check WHAT -- CMD...   count passes and failures
#   wait_for CMD...                 up to 10 s for CMD to succeed
#   free_port                       a free loopback port
#   cli_dir NAME                    DIR, removed at exit with every pid in PIDS
#                                   (and cli_cleanup_more, when a test defines it)
#   start_redis [ARG...]            a private redis-server in DIR on PORT, its pid
#                                   in PIDS; RELOCK_URL points at it
#   expect CODE WHAT -- CMD...      CMD's exit code, and stderr in one
#                                   "relock: ..." form; output in DIR/out, DIR/err
#   finish NAME                     the totals; the exit status of the test
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

wait_for() {
    for _ in $(seq 1 500); do "$@" && return 0; sleep 0.02; done
    return 1
}

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

PIDS=()
cli_cleanup() {
    declare -F cli_cleanup_more >/dev/null && cli_cleanup_more
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$DIR"
}
cli_dir() {
    DIR=$(mktemp -d "/tmp/relock-$1-XXXXXX")
    trap cli_cleanup EXIT
}

start_redis() {
    PORT=$(free_port)
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
        --daemonize no --logfile "$DIR/server.log" "$@" &
    PIDS+=($!)
    # Up when it answers, a refusal for want of a password included.
    for _ in $(seq 1 200); do
        redis-cli -p "$PORT" ping 2>&1 | grep -q 'PONG\|NOAUTH' && break
        sleep 0.05
    done
    export RELOCK_URL="redis://127.0.0.1:$PORT"
}

expect() {
    local want=$1 what=$2
    shift 3
    "$@" >"$DIR/out" 2>"$DIR/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        bad "$what: exit $got, expected $want; stdout: $(cat "$DIR/out"); stderr: $(cat "$DIR/err")"
        return 1
    fi
    if [ -s "$DIR/err" ] && ! grep -q '^relock: ' "$DIR/err"; then
        bad "$what: stderr not in 'relock: what: why' form: $(cat "$DIR/err")"
        return 1
    fi
    ok
}

finish() {
    echo "$1: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
