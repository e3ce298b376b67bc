#!/usr/bin/env bash
# relock over unix sockets, against real redis-servers listening on a
# socket only (port 0): unix:// URLs with a password, an ACL user and a
# database; `path` in a configuration file's servers, a quorum of three
# socket servers included; waiting with release notices on a socket; and
# the messages of a wrong password, a missing socket and a bad URL, which
# name the socket's path.
#   test_unix.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_unix.sh PATH/TO/relock}

PASS=Pw-unix-7c1d03b2
APP=App-unix-5e9f11a4

. "$(dirname "$0")/lib.sh"
cli_dir unix
unset RELOCK_URL RELOCK_CONFIG

# start_server N: redis-server on $DIR/sN.sock, no TCP port, with a
# password and the ACL user app.
start_server() {
    local n=$1
    mkdir -p "$DIR/d$n"
    redis-server --port 0 --unixsocket "$DIR/s$n.sock" --unixsocketperm 700 --save '' \
        --appendonly no --dir "$DIR/d$n" --daemonize no --logfile "$DIR/d$n/server.log" \
        --requirepass "$PASS" --user app on ">$APP" '~*' '&*' '+@all' &
    PIDS+=($!)
    for _ in $(seq 1 200); do
        [ "$(redis-cli -s "$DIR/s$n.sock" --no-auth-warning -a "$PASS" ping 2>/dev/null)" = PONG ] &&
            return 0
        sleep 0.05
    done
    echo "FAIL: redis-server on $DIR/s$n.sock did not start" >&2
    exit 1
}
rcli() { local n=$1; shift; redis-cli -s "$DIR/s$n.sock" --no-auth-warning -a "$PASS" "$@"; }

err_has() { grep -qF -- "$2" "$DIR/err" && ok || bad "$1: $(cat "$DIR/err")"; }
out_has() { grep -qF -- "$2" "$DIR/out" && ok || bad "$1: $(cat "$DIR/out")"; }

start_server 1
S1="$DIR/s1.sock"
URL="unix://:$PASS@$S1"

# Every mode over the socket: acquire, inspect, release.
for mode in legacy bridge modern; do
    expect 0 "$mode: acquire" -- "$RELOCK" -u "$URL" -m $mode acquire -t 10 "u-$mode"
    read -r value fence _ <"$DIR/out"
    [ "$(rcli 1 get "u-$mode")" = "$value" ] && ok || bad "$mode: the key holds $value"
    expect 0 "$mode: inspect" -- "$RELOCK" -u "$URL" -m $mode inspect "u-$mode"
    out_has "$mode: inspect shows the value" "$value"
    expect 0 "$mode: release" -- "$RELOCK" -u "$URL" -m $mode release "u-$mode" "$value" "$fence"
    [ "$(rcli 1 exists "u-$mode")" = 0 ] && ok || bad "$mode: released key still there"
done

# A database after ?db=, and an ACL user.
expect 0 "?db=3: acquire" -- "$RELOCK" -u "unix://:$PASS@$S1?db=3" -m modern acquire -t 10 u-db
[ "$(rcli 1 -n 3 exists u-db)" = 1 ] && ok || bad "?db=3: the key is not in database 3"
[ "$(rcli 1 -n 0 exists u-db)" = 0 ] && ok || bad "?db=3: the key is in database 0"
expect 0 "ACL user: acquire" -- "$RELOCK" -u "unix://app:$APP@$S1" -m modern acquire -t 10 u-acl
expect 0 "run over the socket" -- "$RELOCK" -u "$URL" -m modern run -t 5 u-run -- \
    sh -c 'test -n "$RELOCK_FENCE"'

# The messages name the socket's path, never a port, and no password.
expect 2 "wrong password" -- "$RELOCK" -u "unix://:nope@$S1" probe
err_has "wrong password: refused" "AUTH to $S1 refused"
expect 2 "no password" -- "$RELOCK" -u "unix://$S1" probe
err_has "no password: NOAUTH" "on $S1 refused: NOAUTH"
expect 4 "missing socket" -- "$RELOCK" -u "unix://$DIR/none.sock" probe
err_has "missing socket: said" "connect to $DIR/none.sock: No such file or directory"
expect 2 "relative path" -- "$RELOCK" -u "unix://run/redis.sock" probe
err_has "relative path: said" "absolute path"
expect 2 "other query" -- "$RELOCK" -u "unix://$S1?timeout=1" probe
err_has "other query: said" "only ?db=N"
grep -q -- "$PASS" "$DIR/err" && bad "a password in a message" || ok

# Waiting on a socket: the waiter subscribes for release notices over the
# socket (its subscriber connection shows in CLIENT LIST), and the release
# wakes it.
expect 0 "held for the waiter" -- "$RELOCK" -u "$URL" -m modern acquire -t 30 u-wait
read -r hvalue hfence _ <"$DIR/out"
"$RELOCK" -u "$URL" -m modern acquire -w 20 u-wait >"$DIR/waiter.out" 2>"$DIR/waiter.err" &
waiter=$!
PIDS+=($waiter)
subscribed=0
for _ in $(seq 1 250); do
    if rcli 1 client list | grep -q 'sub=1'; then subscribed=1; break; fi
    sleep 0.02
done
[ $subscribed = 1 ] && ok || bad "the waiter never subscribed over the socket"
expect 0 "release for the waiter" -- "$RELOCK" -u "$URL" -m modern release u-wait "$hvalue" "$hfence"
wait "$waiter"
[ $? = 0 ] && ok || bad "the waiter did not get the lock: $(cat "$DIR/waiter.err")"

# A configuration file: path in servers, credentials beside it.
cat >"$DIR/one.conf" <<EOF
relock = { mode = "modern"; servers = ( { path = "$S1"; password = "$PASS"; db = 2; } ); };
EOF
expect 0 "file: acquire" -- "$RELOCK" -c "$DIR/one.conf" acquire -t 10 u-file
[ "$(rcli 1 -n 2 exists u-file)" = 1 ] && ok || bad "file: the key is not in database 2"
cat >"$DIR/bad.conf" <<EOF
relock = { servers = ( { path = "$S1"; port = 6379; } ); };
EOF
expect 2 "file: path with port" -- "$RELOCK" -c "$DIR/bad.conf" probe
err_has "file: path with port: said" "path (a unix socket) excludes host and port"
cat >"$DIR/rel.conf" <<EOF
relock = { servers = ( { path = "redis.sock"; } ); };
EOF
expect 2 "file: relative path" -- "$RELOCK" -c "$DIR/rel.conf" probe
err_has "file: relative path: said" "absolute path"

# A quorum of three socket servers.
start_server 2
start_server 3
cat >"$DIR/quorum.conf" <<EOF
relock = {
  mode = "modern";
  servers = ( { path = "$DIR/s1.sock"; password = "$PASS"; },
              { path = "$DIR/s2.sock"; username = "app"; password = "$APP"; },
              { path = "$DIR/s3.sock"; password = "$PASS"; } );
};
EOF
expect 0 "quorum: acquire" -- "$RELOCK" -c "$DIR/quorum.conf" acquire -t 10 u-q
read -r qvalue qfence _ <"$DIR/out"
held=0
for n in 1 2 3; do [ "$(rcli $n get u-q)" = "$qvalue" ] && held=$((held + 1)); done
[ $held -ge 2 ] && ok || bad "quorum: the value is on $held of 3 servers"
expect 1 "quorum: held" -- "$RELOCK" -c "$DIR/quorum.conf" acquire -n u-q
expect 0 "quorum: release" -- "$RELOCK" -c "$DIR/quorum.conf" release u-q "$qvalue" "$qfence"
left=0
for n in 1 2 3; do [ "$(rcli $n exists u-q)" = 1 ] && left=$((left + 1)); done
[ $left = 0 ] && ok || bad "quorum: the value is left on $left servers"

finish cli_unix
