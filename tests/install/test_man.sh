#!/usr/bin/env bash
# The man pages: each formats without a single warning (man --warnings,
# groff -ww), and they keep up with the code: relock(1) names every command
# of src/cli/main.c, relock(3) every public function of include/relock/relock.h,
# relock.conf(5) every setting of the table in src/base/config.c.
#   test_man.sh SOURCE_DIR
set -u
SRC=${1:?usage: test_man.sh SOURCE_DIR}
MAN=$SRC/docs/man

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

for tool in man groff; do
    if ! command -v "$tool" >/dev/null; then
        bad "$tool is not installed (./dev installs man-db and groff-base)"
        echo "man_pages: $pass passed, $fail failed"
        exit 1
    fi
done

TMP=$(mktemp -d /tmp/relock-man-XXXXXX)
trap 'rm -rf "$TMP"' EXIT

for page in relock.1 relock.3 relock.conf.5; do
    f=$MAN/$page
    if [ ! -f "$f" ]; then
        bad "$page is missing"
        continue
    fi
    # man: all of groff's warnings, at the usual width and at a narrow one.
    for width in 80 60; do
        LC_ALL=C.UTF-8 MANWIDTH=$width man --warnings=w -l -Tutf8 "$f" >"$TMP/out" 2>"$TMP/err"
        rc=$?
        if [ "$rc" -ne 0 ] || [ -s "$TMP/err" ]; then
            bad "man $page (width $width): exit $rc: $(head -5 "$TMP/err")"
        else
            ok
        fi
    done
    [ "$(wc -l <"$TMP/out")" -gt 20 ] && ok || bad "man $page printed almost nothing"
    if groff -man -ww -z "$f" 2>"$TMP/err" && [ ! -s "$TMP/err" ]; then
        ok
    else
        bad "groff -man -ww $page: $(head -5 "$TMP/err")"
    fi
done

# Text as man shows it, without hyphenation breaks.
render() { LC_ALL=C.UTF-8 MANWIDTH=1000 man -l "$MAN/$1" 2>/dev/null | col -bx; }

# relock(1): every command in the table of src/cli/main.c has a section.
render relock.1 >"$TMP/1"
cmds=$(sed -n '/^} commands\[\] = {/,/^};/p' "$SRC/src/cli/main.c" | grep -o '{"[a-z]*"' | tr -d '{"')
[ -n "$cmds" ] && ok || bad "no commands found in src/cli/main.c"
for c in $cmds; do
    if grep -Eq "^   $c( |$)" "$TMP/1"; then ok; else bad "relock.1 has no section for the command $c"; fi
done

# relock(3): every function declared RELOCK_EXTERN in include/relock/relock.h and
# include/relock/relock_async.h.
render relock.3 >"$TMP/3"
funcs=$(cat "$SRC/include/relock/relock.h" "$SRC/include/relock/relock_async.h" | tr '\n' ' ' | grep -o 'RELOCK_EXTERN [^;]*' | grep -o 'relock_[a-z_]*(' | tr -d '(' | sort -u)
[ "$(wc -w <<<"$funcs")" -gt 30 ] && ok || bad "too few functions found in include/relock/relock.h: $funcs"
for f in $funcs; do
    if grep -q "\b$f(" "$TMP/3"; then ok; else bad "relock.3 does not name $f()"; fi
done
# ... and every status code.
codes=$(grep -o '^    X([A-Z]*,' "$SRC/include/relock/relock.h" | sed 's/    X(\(.*\),/RELOCK_\1/')
for c in $codes; do
    if grep -q "\b$c\b" "$TMP/3"; then ok; else bad "relock.3 does not name $c"; fi
done

# relock.conf(5): every setting of the table in src/base/config.c (groups
# aside), and every member of a servers entry.
render relock.conf.5 >"$TMP/5"
settings=$(sed -n '/^static const setting settings\[\] = {/,/^};/p' "$SRC/src/base/config.c" |
    grep -v 'T_GROUP' | grep -o '{"[a-z_.]*"' | tr -d '{"')
[ "$(wc -w <<<"$settings")" -gt 15 ] && ok || bad "too few settings found in src/base/config.c"
for s in $settings host port db username password; do
    if grep -Eq "^ +$s \(" "$TMP/5"; then ok; else bad "relock.conf.5 does not describe the setting $s"; fi
done

echo "man_pages: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
