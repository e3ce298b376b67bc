#!/usr/bin/env bash
# The shared library's exports are exactly the public API: every function
# declared RELOCK_EXTERN in include/relock/relock.h is exported, and nothing else is
# (hiredis and libconfig live in our users' processes; an internal symbol
# that leaked would become ABI).  relock(3) documenting every one of them
# is checked by test_man.sh.
#   test_symbols.sh LIBRARY HEADER...   (relock.h, relock_async.h)
set -u
LIB=${1:?usage: test_symbols.sh LIBRARY HEADER...}
shift
[ $# -ge 1 ] || { echo "usage: test_symbols.sh LIBRARY HEADER..." >&2; exit 2; }
HDR="$*"

TMP=$(mktemp -d /tmp/relock-sym-XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# Functions and data only, less the linker's own markers (_edata, _end,
# __bss_start).
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TWDR]$/ && $3 !~ /^_(edata|end|_bss_start)$/ {print $3}' | sed 's/@.*//' | sort -u >"$TMP/exported"
# Declarations may span lines: join the header (less preprocessor lines
# and comments), then take the name before the first "(" of each
# RELOCK_EXTERN declaration.
cat $HDR | grep -v '^#' | sed 's:/\*.*\*/::g' | tr '\n' ' ' | sed 's:/\*[^*]*\*\+\([^/*][^*]*\*\+\)*/::g' |
    grep -o 'RELOCK_EXTERN[^;(]*(' | sed 's/($//; s/.*[ *]//' | sort -u >"$TMP/declared"

fail=0
if [ ! -s "$TMP/declared" ]; then
    echo "FAIL: no RELOCK_EXTERN declarations found in $HDR" >&2
    fail=1
fi
extra=$(comm -23 "$TMP/exported" "$TMP/declared")
missing=$(comm -13 "$TMP/exported" "$TMP/declared")
if [ -n "$extra" ]; then
    echo "FAIL: exported but not declared in relock.h: $(echo $extra)" >&2
    fail=1
fi
if [ -n "$missing" ]; then
    echo "FAIL: declared in relock.h but not exported: $(echo $missing)" >&2
    fail=1
fi
echo "api_symbols: $(wc -l <"$TMP/declared") declared, $(wc -l <"$TMP/exported") exported"
exit $fail
