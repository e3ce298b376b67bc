#!/usr/bin/env bash
# -v during a long wait on a terminal: a progress line naming the holder,
# the time waited and when the holder's lease ends, rewritten in place and
# cleared before relock's last word; nothing of it when stderr is no
# terminal.  script(1) gives relock a pseudo-terminal.  Against a real
# redis-server, in legacy and modern modes.
#   test_progress.sh PATH/TO/relock
set -u
RELOCK=${1:?usage: test_progress.sh PATH/TO/relock}
. "$(dirname "$0")/lib.sh"
has() { grep -q -- "$2" "$1" && ok || bad "$3: $(tr '\r\033' '|~' <"$1")"; }
lacks() { grep -q -- "$2" "$1" && bad "$3: $(tr '\r\033' '|~' <"$1")" || ok; }

if ! command -v script >/dev/null; then
    echo "FAIL: script(1) is needed to give relock a terminal" >&2
    exit 1
fi

cli_dir progress
start_redis

# on_tty OUT CMD...: CMD with a terminal for stdin, stdout and stderr; its
# exit code in OUT.code, what the terminal showed in OUT.
on_tty() {
    local out=$1
    shift
    local q
    q=$(printf '%q ' "$@")
    script -qec "$q" /dev/null >"$out" 2>&1 </dev/null
    echo $? >"$out.code"
}

for mode in legacy modern; do
    name=progress-$mode
    "$RELOCK" -m $mode acquire -t 60 $name >/dev/null || bad "$mode: first acquire"

    # acquire: the wait lasts 2.5 s, long enough for two progress lines.
    on_tty "$DIR/acq" "$RELOCK" -m $mode acquire -v -w 2.5 $name
    has "$DIR/acq.code" '^1$' "$mode acquire -v on a terminal: exit code"
    has "$DIR/acq" "waiting for $name 1s; held by" "$mode acquire -v: the first progress line"
    has "$DIR/acq" "waiting for $name 2s; held by" "$mode acquire -v: the line rewritten"
    has "$DIR/acq" ", fence 1, its lease ends in [0-9]" "$mode acquire -v: when the lease ends"
    # Cleared before the last word: "\r ESC[K" then relock's own message.
    has "$DIR/acq" $'\r\033\\[Krelock: acquire: lock '"$name"': still held' \
        "$mode acquire -v: the line cleared before the outcome"

    # run: the same line, and a wait that ends with the lock won clears it.
    on_tty "$DIR/run" "$RELOCK" -m $mode run -v -w 1.5 $name -- true
    has "$DIR/run.code" '^1$' "$mode run -v on a terminal: exit code"
    has "$DIR/run" "relock: run: waiting for $name 1s; held by" "$mode run -v: progress line"

    on_tty "$DIR/hold" "$RELOCK" -m $mode hold -v -w 1.5 $name
    has "$DIR/hold.code" '^1$' "$mode hold -v on a terminal: exit code"
    has "$DIR/hold" "relock: hold: waiting for $name 1s; held by" "$mode hold -v: progress line"

    # No terminal: no progress line, only the outcome.
    "$RELOCK" -m $mode acquire -v -w 1.5 $name >"$DIR/plain" 2>&1
    lacks "$DIR/plain" "waiting for" "$mode acquire -v without a terminal"
    has "$DIR/plain" "waited" "$mode acquire -v without a terminal: the time waited"
    # No -v: no progress line on a terminal either.
    on_tty "$DIR/quiet" "$RELOCK" -m $mode acquire -w 1.5 $name
    lacks "$DIR/quiet" "waiting for" "$mode acquire on a terminal without -v"
done

# A lock won after a wait: the line, if one was shown, is cleared before
# the lock's value is printed.
"$RELOCK" -m modern acquire -t 1.2 progress-short >/dev/null || bad "short: acquire"
on_tty "$DIR/short" "$RELOCK" -m modern acquire -v -w 10 progress-short
has "$DIR/short.code" '^0$' "a lock won after a wait: exit code"
has "$DIR/short" "acquired after" "a lock won after a wait: -v says how long"
last=$(awk -F'\033\\[K' '{print $NF}' "$DIR/short" | tr '\r' '\n')
case $last in *"waiting for"*) bad "a progress line left behind: $last" ;; *) ok ;; esac

finish cli_progress
