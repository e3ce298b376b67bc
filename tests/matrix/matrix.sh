#!/usr/bin/env bash
# relock's integration and interop tests against real servers, one release
# of each line (docs/matrix.md).
#
#   matrix.sh --build DIR [--from ARCHIVES] [--only V[,V...]] [--groups G[,G...]]
#             [--jobs N] [--quiet]
#   matrix.sh --list [--from ARCHIVES] [--only V[,V...]]
#
# --build     a configured and built relock build directory (its ctest runs)
# --from      where the source archives are (redis-2.0.5.tar.gz ...); default
#             ../shared/redis-releases beside the repository
# --only      these versions (2.0.5, 7.4.1, valkey-8.0.1 ...); default all
# --groups    these test groups; default all (see GROUPS below)
# --jobs      test programs run at once (default 1), each against its own
#             server; they mostly wait on timers, so more than the cores is fine
# --quiet     no progress lines, only the table and the failures
# --list      only print the versions that would be tested (exit 2 when an
#             archive is missing), building and running nothing
#
# Each server is built once (tests/matrix/servers.sh, cached outside the
# repository) and started by the tests themselves (tests/support/testsrv.c:
# RELOCK_TEST_SERVER, a config file before 2.6).  Prints one table, server
# version by test group, PASS / FAIL / n/a, and exits 1 when a cell failed,
# 2 on bad usage or when no archive is found.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# group: ctest name, the first version it applies to
GROUPS_ALL=(legacy bridge modern fence interop boundaries replies async)
declare -A CTEST=([legacy]=it_legacy [bridge]=it_bridge [modern]=it_modern [fence]=it_fence
                  [interop]=interop [boundaries]=it_boundaries [replies]=proxy
                  [async]='(it_async_libevent|it_boundaries_async|it_boundaries_async_native|it_boundaries_async_own)')
declare -A SINCE=([legacy]=0 [bridge]=0 [modern]=20612 [fence]=0 [interop]=0
                  [boundaries]=0 [replies]=0 [async]=0)
# Before this version the group runs a part only: its cell is marked "*".
declare -A PARTIAL_BEFORE=([bridge]=20600)

build= from= only= groups= jobs=1 quiet=0 list=0
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --from) from=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --groups) groups=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --quiet) quiet=1; shift ;;
        --list) list=1; shift ;;
        *) echo "matrix: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $jobs =~ ^[1-9][0-9]?$ ]] || { echo "matrix: --jobs takes a number from 1" >&2; exit 2; }

default_from=$(cd "$ROOT/.." && pwd)/shared/redis-releases
from=${from:-$default_from}
mapfile -t available < <([ -d "$from" ] && "$HERE/servers.sh" list "$from")
if [ ${#available[@]} -eq 0 ]; then
    echo "matrix: no server archives in $from" >&2
    echo "matrix: put release archives there (redis-2.0.5.tar.gz, redis-7.4.1.tar.gz, valkey-8.0.1.tar.gz, ...)" >&2
    echo "matrix: or name their directory with --from DIR (docs/matrix.md)" >&2
    exit 2
fi

versions=()
if [ -n "$only" ]; then
    IFS=, read -ra wanted <<<"$only"
    for v in "${wanted[@]}"; do
        v=${v#redis-}
        if ! printf '%s\n' "${available[@]}" | grep -qxF -- "$v"; then
            echo "matrix: no archive of $v in $from (there: ${available[*]})" >&2
            exit 2
        fi
        versions+=("$v")
    done
else
    versions=("${available[@]}")
fi

sel_groups=("${GROUPS_ALL[@]}")
if [ -n "$groups" ]; then
    IFS=, read -ra sel_groups <<<"$groups"
    for g in "${sel_groups[@]}"; do
        [ -n "${CTEST[$g]:-}" ] || { echo "matrix: no group $g (groups: ${GROUPS_ALL[*]})" >&2; exit 2; }
    done
fi

if [ "$list" = 1 ]; then
    printf '%s\n' "${versions[@]}"
    exit 0
fi
[ -n "$build" ] && [ -f "$build/CTestTestfile.cmake" ] ||
    { echo "matrix: --build must name a built relock build directory" >&2; exit 2; }
build=$(cd "$build" && pwd)

say() { [ "$quiet" = 1 ] || printf '%s\n' "$*"; }

# 2.6.11 -> 20611; valkey-8.0.1 -> 80001
vnum() {
    local v=${1#valkey-} a b c
    IFS=. read -r a b c <<<"$v"
    echo $((a * 10000 + b * 100 + ${c:-0}))
}

out=$(mktemp -d "${TMPDIR:-/tmp}/relock-matrix-XXXXXX")

# Builds (or finds) every server first, one at a time: two builds at once
# would starve the tests of a 2-core machine.
declare -A BIN BUILD_S
for v in "${versions[@]}"; do
    t0=$(date +%s)
    if ! BIN[$v]=$("$HERE/servers.sh" build "$from" "$v" 2>"$out/$v-build.err"); then
        BIN[$v]=
        say "$v: build failed ($(tail -n 1 "$out/$v-build.err"))"
    fi
    BUILD_S[$v]=$(($(date +%s) - t0))
    [ -n "${BIN[$v]}" ] && say "$v: server ready (${BUILD_S[$v]} s): ${BIN[$v]}"
done

# One group against one version: writes VERSION-GROUP.res (PASS, FAIL,
# n/a), .log and .secs.
run_cell() {
    local v=$1 g=$2 t0 res
    t0=$(date +%s)
    if [ -z "${BIN[$v]}" ]; then
        res=FAIL
        cp "$out/$v-build.err" "$out/$v-$g.log"
    elif [ "$(vnum "$v")" -lt "${SINCE[$g]}" ]; then
        res=n/a
    elif (cd "$build" && RELOCK_TEST_SERVER=${BIN[$v]} RELOCK_TEST_SERVER_VERSION=${v#valkey-} \
            ctest -R "^${CTEST[$g]}\$" --output-on-failure --timeout 600) >"$out/$v-$g.log" 2>&1 &&
         grep -q "100% tests passed" "$out/$v-$g.log"; then
        res=PASS
    else
        res=FAIL
    fi
    echo "$res" >"$out/$v-$g.res"
    echo $(($(date +%s) - t0)) >"$out/$v-$g.secs"
    say "$v: $g $res"
}

# The longest groups first, the versions in the order given, N at a time.
for g in interop bridge boundaries async legacy modern fence replies; do
    printf '%s\n' "${sel_groups[@]}" | grep -qxF "$g" || continue
    for v in "${versions[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
        run_cell "$v" "$g" &
    done
done
wait

# The table in version order, whatever the order of --only.
ordered=()
for a in "${available[@]}"; do
    for v in "${versions[@]}"; do
        [ "$a" = "$v" ] && { ordered+=("$v"); break; }
    done
done
versions=("${ordered[@]}")

# The table: one row per server, one column per group.
failed=0 partial=0
printf '\n%-14s' "server"
for g in "${sel_groups[@]}"; do printf ' %-10s' "$g"; done
printf ' %8s %8s\n' "build s" "tests s"
for v in "${versions[@]}"; do
    printf '%-14s' "$v"
    for g in "${sel_groups[@]}"; do
        res=$(cat "$out/$v-$g.res" 2>/dev/null || echo FAIL)
        [ "$res" = FAIL ] && failed=1
        if [ "$res" != n/a ] && [ "$(vnum "$v")" -lt "${PARTIAL_BEFORE[$g]:-0}" ]; then
            res="$res*"
            partial=1
        fi
        printf ' %-10s' "$res"
    done
    secs=0
    for g in "${sel_groups[@]}"; do
        secs=$((secs + $(cat "$out/$v-$g.secs" 2>/dev/null || echo 0)))
    done
    printf ' %8s %8s\n' "${BUILD_S[$v]}" "$secs"
done
[ "$partial" = 1 ] &&
    echo "* bridge before 2.6.0 (no EVAL, no bridge mode): legacy mode's waiting, release notices and renewal only"
if [ "$failed" = 1 ]; then
    echo
    for v in "${versions[@]}"; do
        for g in "${sel_groups[@]}"; do
            [ "$(cat "$out/$v-$g.res" 2>/dev/null || echo FAIL)" = FAIL ] &&
                echo "FAIL $v $g: log $out/$v-$g.log"
        done
    done
    exit 1
fi
rm -rf "$out"
