#!/usr/bin/env bash
# Whom relock signals and what it leaves behind, against a real
# redis-server with real processes:
#   - hold --notify parent after the script that started it has ended: the
#     process hold was handed to (a subreaper: a service manager, a
#     container's init) is not its parent and gets no signal.
#   test_strays.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_strays.sh PATH/TO/relock}
. "$(dirname "$0")/lib.sh"
cli_dir strays
cli_cleanup_more() { for f in "$DIR"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; }
start_redis
R() { "$RELOCK" -m modern "$@"; }
has() { [ -s "$1" ]; }

# --- 1. --notify parent once the parent is gone: a subreaper (here a
# python process marked with PR_SET_CHILD_SUBREAPER, as systemd --user and
# container inits are) inherits hold when the script ends; the loss must
# not send it the script's SIGTERM.
cat >"$DIR/subreaper.py" <<'PY'
import ctypes, os, signal, subprocess, sys, time
relock, d = sys.argv[1], sys.argv[2]
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
got = []
signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
# The script starts hold in the background, waits (up to 10 s) until it
# holds the lock, and ends.
subprocess.run(["sh", "-c", relock + " -m modern hold --no-stdin --notify parent -t 3s s-np "
                "</dev/null >" + d + "/np.out 2>" + d + "/np.err & echo $! >" + d + "/np.pid; "
                "for i in $(seq 1 500); do [ -s " + d + "/np.out ] && break; sleep 0.02; done"])
pid = int(open(d + "/np.pid").read())
subprocess.run([relock, "-m", "modern", "break", "s-np"], stdout=subprocess.DEVNULL)
code = None
for _ in range(500):  # hold notices at its next renewal, within 1 s; up to 10 s
    try:
        r, st = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        break
    if r == pid:
        code = os.waitstatus_to_exitcode(st)
        break
    time.sleep(0.02)
print("exit=%s sigterm=%d" % (code, len(got)))
PY
$PY "$DIR/subreaper.py" "$RELOCK" "$DIR" >"$DIR/np.res" 2>&1
check "notify orphan: hold exits 3 after the loss ($(cat "$DIR/np.res"): $(cat "$DIR/np.err"))" -- \
    grep -q '^exit=3 ' "$DIR/np.res"
check "notify orphan: the subreaper got no SIGTERM ($(cat "$DIR/np.res"))" -- \
    grep -q 'sigterm=0$' "$DIR/np.res"
check "notify orphan: hold says nobody was told: $(cat "$DIR/np.err")" -- \
    grep -q '^relock: hold: --notify parent: .*has ended' "$DIR/np.err"

# --- 2. --on-lost before -v's look at the key: with the server stopped,
# reading the key costs command_timeout_ms (here 5 s); the loss itself is
# known when the 3 s lease's validity ends.
SRV=${PIDS[0]}
printf 'relock = {\n  mode = "modern";\n  command_timeout_ms = 5000;\n  connect_timeout_ms = 5000;\n  servers = ( { host = "127.0.0.1"; port = %s; } );\n};\n' \
    "$PORT" >"$DIR/slow.conf"
env -u RELOCK_URL "$RELOCK" -c "$DIR/slow.conf" hold -v --no-stdin -t 3s \
    --on-lost "date +%s%3N >$DIR/ol.at" s-ol </dev/null >"$DIR/ol.out" 2>"$DIR/ol.err" &
HOLD=$!
echo "$HOLD" >"$DIR/ol.pid"
check "on-lost: held" -- wait_for has "$DIR/ol.out"
held_at=$(date +%s%3N)
kill -STOP "$SRV"
code=0
wait "$HOLD" || code=$?
kill -CONT "$SRV"
check "on-lost: hold exits 3 (exit $code: $(cat "$DIR/ol.err"))" -- [ "$code" -eq 3 ]
# The lease began before VALUE FENCE was seen, so it ended before
# held_at + 3 s; 1.5 s more is slack for a loaded machine, well short of
# the 5 s a read of the stopped server takes.
check "on-lost: it ran" -- has "$DIR/ol.at"
took=99999
[ -s "$DIR/ol.at" ] && took=$(( $(cat "$DIR/ol.at") - held_at ))
check "on-lost: ran within 4.5 s of the hold, not after -v's 5 s read ($took ms)" -- \
    [ "$took" -lt 4500 ]

# --- 3. relock killed with little validity left: the server stops just
# after the acquisition, so no renewal succeeds; relock is killed 10 s into
# a 12 s lease, when less than the guardian's quarter of the TTL (3 s)
# remains.  The key expires on the server's clock at PEXPIRETIME.
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
"$RELOCK" -m modern run --json -t 12s s-gd -- sh -c "trap '' TERM; echo \$\$ >$DIR/gd.pid; while :; do sleep 0.05; done" \
    >/dev/null 2>"$DIR/gd.err" &
RUN=$!
check "guardian: CMD started" -- wait_for has "$DIR/gd.pid"
CMDPID=$(cat "$DIR/gd.pid")
echo "$CMDPID" >"$DIR/gdcmd.pid"
expires=$(redis-cli -p "$PORT" PEXPIRETIME s-gd)
kill -STOP "$SRV"
sleep_until=$((expires - 2000))
while [ "$(date +%s%3N)" -lt "$sleep_until" ]; do sleep 0.05; done
kill -KILL "$RUN"
for _ in $(seq 1 500); do alive "$CMDPID" || break; sleep 0.02; done # up to 10 s
gone_at=$(date +%s%3N)
kill -CONT "$SRV"
wait "$RUN" 2>/dev/null
check "guardian: CMD was ended" -- wait_for sh -c "! [ -r /proc/$CMDPID/status ] || grep -q '^State:[[:space:]]*Z' /proc/$CMDPID/status"
# The validity ends 1% + 2 ms (122 ms) before the key expires; 500 ms past
# the expiry is slack for a loaded machine, short of the 1 s a quarter of
# the TTL after the kill reached.
check "guardian: CMD ended by the key's expiry (at $((gone_at - expires)) ms from it)" -- \
    [ $((gone_at - expires)) -lt 500 ]

# --- 4. RELOCK_CONFIG empty means no file; the default file (here
# $XDG_CONFIG_HOME/relock.conf, with another key_prefix) must not be read by
# the release the guardian starts, or it releases another key and waiters
# sit out the 20 s lease.
mkdir -p "$DIR/xdg"
printf 'relock = {\n  key_prefix = "other:";\n};\n' >"$DIR/xdg/relock.conf"
RELOCK_CONFIG= XDG_CONFIG_HOME="$DIR/xdg" "$RELOCK" -m modern run -t 20s s-nc -- \
    sh -c "echo \$\$ >$DIR/nc.pid; sleep 60" >/dev/null 2>"$DIR/nc.err" &
RUN=$!
check "no file: CMD started" -- wait_for has "$DIR/nc.pid"
echo "$(cat "$DIR/nc.pid")" >"$DIR/nccmd.pid"
kill -KILL "$RUN"
wait "$RUN" 2>/dev/null
R acquire -w 12s s-nc >"$DIR/out" 2>"$DIR/err"
code=$?
check "no file: a waiter acquires within 12 s, not the 20 s lease (exit $code: $(cat "$DIR/err"))" -- \
    [ "$code" -eq 0 ]

# --- 5. Ctrl-Z: an interactive bash on a pseudo-terminal runs relock run;
# Ctrl-Z stops CMD's group, which has the terminal; relock must stop too,
# or the shell waits for it and the terminal takes nothing but input.  CMD
# execs its sleep: a shell that forks it with vfork cannot stop until the
# child has exec'd, and a Ctrl-Z in between stops the child alone.
cat >"$DIR/tstp.py" <<'PY'
import os, pty, select, sys, time
relock = sys.argv[1]
pid, fd = pty.fork()
if pid == 0:
    os.execvp("bash", ["bash", "--norc", "--noprofile", "-i"])
seen = b""
def until(word, secs):
    global seen
    end = time.time() + secs
    while time.time() < end and word not in seen:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return word in seen
# Up to 10 s for the first prompt (bash's default ends in "$ " or "# "),
# read ahead of input; it comes within milliseconds, and waiting for it
# rather than a fixed time keeps the run short.
end = time.time() + 10
while time.time() < end and not seen.rstrip(b" ").endswith((b"$", b"#")):
    until(b"\0", 0.1)  # whatever comes within 0.1 s
os.write(fd, b"PS1='PROMPT''> '\n")
until(b"PROMPT> ", 10)
# In a script when the second argument says so: the shell waits for the
# script, which relock stops with itself.
line = relock + " -m modern run -t 30s s-tz -- sh -c 'echo ST''ART; exec sleep 2'"
if sys.argv[2] == "script":
    line = "bash -c \"" + line + "; echo AF''TER\""
os.write(fd, (line + "\n").encode())
until(b"START", 10)
os.write(fd, b"\x1a")
time.sleep(0.3)
os.write(fd, b"echo BACK$((1+1))\n")
back = until(b"BACK2", 10)
done = False
if back:
    os.write(fd, b"fg; echo RC$((40+2))$?\n")
    done = until(b"RC420", 15)  # CMD went on to its end, and run exited 0
print("back=%d done=%d" % (back, done))
if not (back and done):
    print(repr(seen[-300:]))
# What the shell started, found by parent pid from /proc, ends with it.
def children(of):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = open("/proc/%s/stat" % d).read()
            except OSError:
                continue
            if int(st[st.rindex(")") + 2:].split()[1]) == of:
                out.append(int(d))
    return out
tree, todo = [], [pid]
while todo:
    kids = children(todo.pop())
    tree += kids
    todo += kids
for p in [pid] + tree:
    for sig in (18, 9):  # SIGCONT, SIGKILL
        try:
            os.kill(p, sig)
        except OSError:
            pass
PY
for how in prompt script; do
    $PY "$DIR/tstp.py" "$RELOCK" "$how" >"$DIR/tstp.res" 2>&1
    check "ctrl-z ($how): the shell had the terminal back ($(cat "$DIR/tstp.res"))" -- \
        grep -q 'back=1' "$DIR/tstp.res"
    check "ctrl-z ($how): fg continued CMD, which ended, and run exited 0 ($(cat "$DIR/tstp.res"))" -- \
        grep -q 'done=1' "$DIR/tstp.res"
    check "ctrl-z ($how): released" -- wait_for sh -c "[ \"\$(redis-cli -p $PORT EXISTS s-tz)\" = 0 ]"
done

finish cli_strays
