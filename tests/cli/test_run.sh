#!/usr/bin/env bash
# relock run supervises CMD's whole process tree, with real processes
# against a real redis-server:
#   - a lost lock (relock break) ends every process of CMD's group;
#   - SIGTERM sent to relock reaches every process of the group;
#   - SIGKILL of relock (as the OOM killer would): the group is ended,
#     SIGKILL included for a CMD that ignores SIGTERM, and the lock is
#     released only then;
#   - SIGUSR1 and SIGUSR2 are passed on to CMD, never read as a loss.
#   test_run.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_run.sh PATH/TO/relock}
. "$(dirname "$0")/lib.sh"
cli_dir run
# Leftovers of a failed check: the pids CMDs wrote down.
cli_cleanup_more() { for f in "$DIR"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; }
start_redis
R() { "$RELOCK" -m modern "$@"; }
rcli() { redis-cli -p "$PORT" "$@"; }

# Alive: exists and is not a zombie (a killed orphan waits for init, which
# in a container may be slow to reap it).
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
gone() { ! alive "$1"; }
has_pid() { [ -s "$1" ]; }
not_stopped() { alive "$1" && ! grep -q '^State:[[:space:]]*T' "/proc/$1/status" 2>/dev/null; }
wait_for_not_stopped() { wait_for not_stopped "$1"; }

# A CMD whose grandchild (a background sleep) writes its pid down: the
# process that a signal to CMD alone would leave running.
tree_cmd() { echo "sleep 97 & echo \$! >$DIR/$1.pid; wait"; }

# --- 1. the lock is lost (an operator's break): the whole tree ends
"$RELOCK" -m modern run -t 3s tree-lost -- sh -c "$(tree_cmd lost)" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "lost: the grandchild started" -- wait_for has_pid "$DIR/lost.pid"
GRAND=$(cat "$DIR/lost.pid")
R break tree-lost >/dev/null 2>&1
code=0
wait "$RUN" || code=$?
check "lost: run exits 3 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 3 ]
check "lost: the grandchild $GRAND ended too" -- wait_for gone "$GRAND"

# --- 2. SIGTERM to relock reaches the whole group
"$RELOCK" -m modern run -t 3s tree-term -- sh -c "$(tree_cmd term)" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "term: the grandchild started" -- wait_for has_pid "$DIR/term.pid"
GRAND=$(cat "$DIR/term.pid")
kill -TERM "$RUN"
code=0
wait "$RUN" || code=$?
check "term: run exits with CMD's 143 (exit $code)" -- [ "$code" -eq 143 ]
check "term: the grandchild $GRAND ended too" -- wait_for gone "$GRAND"
check "term: the lock was released" -- [ "$(rcli EXISTS tree-term)" = 0 ]

# --- 3. SIGKILL of relock.  CMD ignores SIGTERM (and so does the sleep it
# starts), so only the escalation to SIGKILL ends it.  Lease 4 s: renewed
# every 1.3 s, at least 2.6 s left when relock dies; the group must be gone
# before the key is (the check below looks while the grandchild lives).
"$RELOCK" -m modern run -t 4s tree-kill -- sh -c "trap '' TERM; $(tree_cmd kill)" >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "kill: the grandchild started" -- wait_for has_pid "$DIR/kill.pid"
GRAND=$(cat "$DIR/kill.pid")
kill -KILL "$RUN"
wait "$RUN" 2>/dev/null
# The grandchild ignores SIGTERM: it lives until the guardian's SIGKILL, a
# quarter of the lease (1 s) after relock's death.
check "kill: the lock is held while the grandchild $GRAND lives" -- [ "$(rcli EXISTS tree-kill)" = 1 ]
check "kill: the grandchild $GRAND ended after relock's death" -- wait_for gone "$GRAND"
# In modern mode the guardian then has the lock released (relock release
# --after-group): the key goes once the group is gone, so a second run of
# the same name need not wait out the lease.
check "kill: a second run acquires once the group is gone" -- R run -w 10s tree-kill -- true

# --- 3b. SIGKILL of relock while it starts the guardian.  strace holds
# relock's second fork (the guardian's; the first is CMD's) for 1.5 s:
# CMD must not run until the guardian is in place, or a relock killed in
# that window leaves CMD's group running with nobody to end it.
command -v strace >/dev/null || bad "early: strace is needed (./dev installs it)"
strace -f --seccomp-bpf -o /dev/null -e trace=clone -e inject=clone:delay_enter=1500000:when=2 \
    "$RELOCK" -m modern run -t 4s tree-early -- sh -c "trap '' TERM; $(tree_cmd early)" \
    >"$DIR/out" 2>"$DIR/err" &
TRACER=$!
PIDS+=("$TRACER")
traced() { RUN=$(pgrep -P "$TRACER" -x relock) && [ -n "$RUN" ]; }
check "early: relock started under strace" -- wait_for traced
check "early: the grandchild started" -- wait_for has_pid "$DIR/early.pid"
GRAND=$(cat "$DIR/early.pid")
kill -KILL "$RUN"
check "early: the grandchild $GRAND ended after relock's death" -- wait_for gone "$GRAND"
kill -KILL "$TRACER" 2>/dev/null
wait "$TRACER" 2>/dev/null

# --- 4. SIGUSR1 and SIGUSR2 are CMD's, not relock's: passed on, no loss
for sig in USR1 USR2; do
    "$RELOCK" -m modern run -t 3s "tree-$sig" -- sh -c "trap 'exit 7' $sig; echo \$\$ >$DIR/$sig.pid; while :; do sleep 0.05; done" \
        >"$DIR/out" 2>"$DIR/err" &
    RUN=$!
    check "$sig: CMD started" -- wait_for has_pid "$DIR/$sig.pid"
    kill -"$sig" "$RUN"
    code=0
    wait "$RUN" || code=$?
    check "$sig: CMD got it and exited 7, relock passed that on (exit $code: $(cat "$DIR/err"))" -- \
        [ "$code" -eq 7 ]
    check "$sig: no loss reported: $(cat "$DIR/err")" -- [ "$(grep -c "relock:" "$DIR/err")" = 0 ]
    check "$sig: the lock was released" -- [ "$(rcli EXISTS "tree-$sig")" = 0 ]
done

# --- 5. Lost while CMD is stopped: relock continues the group after its
# SIGTERM, so CMD acts on it at once (its trap writes a mark) rather than
# sleeping through the grace period into SIGKILL.
"$RELOCK" -m modern run -t 3s tree-stopped -- \
    sh -c "trap 'echo term >$DIR/stopped.term; exit 5' TERM; echo \$\$ >$DIR/stopped.pid; while :; do sleep 0.05; done" \
    >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "stopped: CMD started" -- wait_for has_pid "$DIR/stopped.pid"
CMDPID=$(cat "$DIR/stopped.pid")
stopped() { grep -q '^State:[[:space:]]*T' "/proc/$1/status" 2>/dev/null; }
kill -STOP -- "-$CMDPID"
check "stopped: CMD is stopped" -- wait_for stopped "$CMDPID"
R break tree-stopped >/dev/null 2>&1
code=0
wait "$RUN" || code=$?
check "stopped: run exits 3 (exit $code: $(cat "$DIR/err"))" -- [ "$code" -eq 3 ]
check "stopped: CMD was continued and ran its TERM trap" -- [ -s "$DIR/stopped.term" ]

# --- 6. SIGCONT to relock is passed on: a job stopped as a whole (relock's
# group, then CMD's) and continued through relock's group goes on as a
# whole.  setsid gives relock a group of its own to signal.
setsid "$RELOCK" -m modern run -t 3s tree-cont -- \
    sh -c "echo \$\$ >$DIR/cont.pid; i=0; while [ \$i -lt 400 ]; do i=\$((i+1)); echo \$i >$DIR/cont.count; sleep 0.02; done" \
    >"$DIR/out" 2>"$DIR/err" &
RUN=$!
check "cont: CMD started" -- wait_for has_pid "$DIR/cont.pid"
CMDPID=$(cat "$DIR/cont.pid")
RELOCKPGID=$(ps -o pgid= -p "$RUN" | tr -d ' ')
kill -STOP -- "-$RELOCKPGID"
kill -STOP -- "-$CMDPID"
check "cont: CMD is stopped" -- wait_for stopped "$CMDPID"
kill -CONT -- "-$RELOCKPGID"
check "cont: CMD goes on once relock is continued" -- wait_for_not_stopped "$CMDPID"
kill -CONT -- "-$CMDPID" 2>/dev/null # whatever happened above: nothing left stopped
kill -TERM "$RUN" 2>/dev/null
wait "$RUN" 2>/dev/null

finish cli_run
