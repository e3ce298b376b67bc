#!/usr/bin/env bash
# The simulator's teeth (docs/architecture.md, "Simulator"): each patch in
# tests/sim/reverts/ undoes one double-holder fix of issue 13 in the
# machines (or the operation core and leaves they use: 3, a transaction's
# lost connection replaced by a new one under it, 4, legacy.clock =
# "server" kept as an offset from the local wall clock, measured once per
# connection), or one the simulator
# found (7: the probe's rule, decision 135), or one of the validity rule
# and the server's clock steps (8, 9), or one line it could not see before
# (10: the 2.0 break counter alone, 11: a script's compare, 12: the
# quorum's validity, 13: the durability verdict), or one of a waiter's
# load (14: a quorum's undo announcing a release, which woke the waiter
# itself), or one of the asynchronous client's operation core, found by
# its simulated client (15: an unacknowledged extend's validity bound in
# the core's phases, with the cap of a failed extend at its new lease, which
# alone keeps it too, 16: the loss deadline's timer, 17: a renewal retried
# after a refused connect or failed setup, 18: a transient error to a
# reconnect's setup leaving the client usable, 19: a quorum's clean-up
# following late servers, 23: a release that waited behind a renewal, its
# handle freed, still running), or one of the asynchronous client with the
# timestamp modes' clocks and on 2.0 (25: legacy.clock = "server" read from
# the local wall clock instead of the estimate, 26: a takeover on an
# estimate of the server's clock from before the value was read, 27: a
# validity counted from TIME's reply instead of its send, 28: a renewal's
# GETSET whose reply was lost not remembered, so the next renewal takes its
# own write for another's); built with it, the simulator must find a
# violation.  Patches named *.asan.patch undo a fix of a use after free in
# the asynchronous client (20: a cancel from a callback inside the walk of
# a connection's queue, 21: the walk of a channel's waiters after the last
# one left, 22: a free of the client from a callback run by another
# operation's flush, 24: a free of the client while a release waits behind
# a renewal): those are built with the sanitizers (a second build,
# made when one is selected), where the simulator's run must end in the
# sanitizer's report.  One rule no simulated client reaches is checked by
# an integration test instead (3: every machine ends its transaction at
# its first fault, and the core writes each batch at once, so a
# connection lost between two batches is the next one's LOST; the test
# machine of it_drive goes on after the fault, as the rule supposes): its
# patch builds it_drive too, run against a real redis-server, and the
# check with every fix in place runs it as well.  Works in a temporary
# worktree of HEAD, so the checkout is never modified; builds only
# relock_sim there (and it_drive for 3).
#
#   tests/sim/reverts.sh            every patch
#   tests/sim/reverts.sh 3 5        patches whose names start with 3 or 5
#
# Exit status 0 when every patch made the simulator fail, 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$(mktemp -d /tmp/relock-reverts.XXXXXX)
cleanup() {
    git -C "$ROOT" worktree remove --force "$DIR/src" >/dev/null 2>&1 || true
    rm -rf "$DIR"
}
trap cleanup EXIT
git -C "$ROOT" worktree add --detach "$DIR/src" HEAD >/dev/null 2>&1
# The working tree's own simulator and patches, in case they are not committed yet.
cp -r "$ROOT/tests/sim/." "$DIR/src/tests/sim/"
cmake -S "$DIR/src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$DIR/build" -j "$(nproc)" --target relock_sim >/dev/null
SIM="$DIR/build/tests/sim/relock_sim"
NORMAL="$SIM"
ASAN=""
DRIVE="$DIR/build/tests/it_drive"
DRIVE_BUILT=0

# Which simulator run must fail once each fix is undone ("A && B": A's run
# or B's; "A || B": both).
run_for() {
    case "$1" in
    1-*) "$SIM" --boundaries --scenario bridge-offset0 ;;
    2-*) "$SIM" --boundaries --scenario break-legacy-2.0 &&
         "$SIM" --boundaries --scenario break-legacy-2.2 ;;
    3-*) "$DRIVE" ;;
    4-*) "$SIM" --boundaries --scenario clock-server ;;
    5-*) "$SIM" --boundaries --scenario fence-tag ;;
    6-*) "$SIM" --boundaries --scenario legacy-2.0 ;;
    7-*) "$SIM" --seed 1 --scenario probe-loading ;;
    8-*) "$SIM" --boundaries --scenario extend-short-modern-7 ;;
    9-*) "$SIM" --boundaries --scenario server-clock-back-legacy-7 &&
         "$SIM" --boundaries --scenario server-clock-forward-legacy-7 ;;
    10-*) "$SIM" --boundaries --scenario break-legacy-2.0 ||
          "$SIM" --boundaries --scenario async-break-legacy-2.0 ;;
    11-*) "$SIM" --boundaries --scenario modern-7 ;;
    12-*) "$SIM" --boundaries --scenario quorum-3-one-down ;;
    13-*) "$SIM" --boundaries --scenario durable-modern-7 ;;
    14-*) "$SIM" --boundaries --scenario quorum-3-one-down ;;
    15-*) "$SIM" --boundaries --scenario async-durable-modern-7 ;;
    16-*) "$SIM" --boundaries --scenario async-keep-stall ;;
    17-*) "$SIM" --boundaries --scenario async-keep-modern-7 ;;
    18-*) "$SIM" --boundaries --scenario async-keep-modern-7 ;;
    19-*) "$SIM" --boundaries --scenario async-quorum-late ;;
    20-*) "$SIM" --boundaries --scenario async-modern-7 ;;
    21-*) "$SIM" --boundaries --scenario async-waiters-late-subscribe ;;
    22-*) "$SIM" --boundaries --scenario async-lost-handle ;;
    23-*) "$SIM" --boundaries --scenario async-keep-release-free ;;
    24-*) "$SIM" --boundaries --scenario async-keep-free-client ;;
    25-*) "$SIM" --boundaries --scenario async-clock-server-legacy-2.6.0 ;;
    26-*) "$SIM" --boundaries --scenario async-server-clock-back-legacy-7 ;;
    27-*) "$SIM" --boundaries --scenario async-clock-server-slow ;;
    28-*) "$SIM" --boundaries --scenario async-keep-legacy-2.0 ;;
    *) echo "no run known for $1" >&2; return 0 ;;
    esac
}

failed=0
for p in "$ROOT"/tests/sim/reverts/*.patch; do
    name=$(basename "$p" .patch)
    if [ $# -gt 0 ]; then
        want=0
        for a in "$@"; do [[ $name == "$a"* ]] && want=1; done
        [ $want = 1 ] || continue
    fi
    git -C "$DIR/src" apply "$p"
    if [[ $name == *.asan ]]; then
        if [ -z "$ASAN" ]; then
            cmake -S "$DIR/src" -B "$DIR/build-asan" -DRELOCK_SANITIZE=ON \
                -DCMAKE_BUILD_TYPE=Debug >/dev/null
            ASAN="$DIR/build-asan/tests/sim/relock_sim"
        fi
        cmake --build "$DIR/build-asan" -j "$(nproc)" --target relock_sim >/dev/null
        SIM="$ASAN"
    else
        cmake --build "$DIR/build" -j "$(nproc)" --target relock_sim >/dev/null
        SIM="$NORMAL"
    fi
    if [[ $name == 3-* ]]; then
        cmake --build "$DIR/build" -j "$(nproc)" --target it_drive >/dev/null
        DRIVE_BUILT=1
    fi
    if run_for "$name" >"$DIR/out" 2>&1; then
        echo "reverts: $name: the simulator found NOTHING"
        failed=1
    else
        echo "reverts: $name: found: $(grep -m1 -o -E 'VIOLATION[^:]*: .*|SUMMARY: .*|runtime error: .*|test_[a-z_]*\.c:[0-9]+' "$DIR/out" | cut -c1-160)"
    fi
    git -C "$DIR/src" apply -R "$p"
    SIM="$NORMAL"
done
cmake --build "$DIR/build" -j "$(nproc)" --target relock_sim >/dev/null
if "$SIM" --seeds 200 >"$DIR/out" 2>&1; then
    echo "reverts: with every fix in place: no violation"
else
    echo "reverts: with every fix in place: VIOLATION"; cat "$DIR/out"; failed=1
fi
if [ $DRIVE_BUILT = 1 ]; then
    cmake --build "$DIR/build" -j "$(nproc)" --target it_drive >/dev/null
    if "$DRIVE" >"$DIR/out" 2>&1; then
        echo "reverts: with every fix in place: it_drive passes"
    else
        echo "reverts: with every fix in place: it_drive FAILS"; cat "$DIR/out"; failed=1
    fi
fi
exit $failed
