#!/usr/bin/env bash
# The installed package as its users see it.  Installs the build into a
# temporary prefix, then builds and runs tests/install/consumer.c against it
# three ways: with `pkg-config --cflags --libs relock`, and with a small
# CMake project using find_package(relock CONFIG REQUIRED), linking
# relock::relock and relock::relock_static.  Also checks the installed
# files: SONAME, the man pages, the command, and that nothing else (the
# compat proxy, the tests) was installed.  The public headers, in
# include/relock, name no hiredis: programs build against them with a
# hiredis that cannot be included, and link relock and their loop only.
#   test_install.sh BUILD_DIR TESTS_INSTALL_DIR SANITIZE(0|1)
set -u
BUILD=${1:?usage: test_install.sh BUILD_DIR TESTS_INSTALL_DIR SANITIZE}
HERE=${2:?}
SANITIZE=${3:-0}

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
check() {
    local what=$1
    shift 2
    if "$@"; then ok; else bad "$what"; fi
}

TMP=$(mktemp -d /tmp/relock-install-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PREFIX=$TMP/prefix

# An instrumented library needs its runtime in the program that loads it.
CFLAGS_EXTRA=
if [ "$SANITIZE" = 1 ] || [ "$SANITIZE" = ON ]; then
    CFLAGS_EXTRA="-fsanitize=address,undefined"
fi
# The version the sources declare, read as CMake reads it.
HDR=$(dirname "$HERE")/../include/relock/relock.h
want_version=$(sed -n 's/^#define RELOCK_VERSION_STRING "\(.*\)"/\1/p' "$HDR")
want_major=${want_version%%.*}
# The SONAME's version: major.minor before 1.0 (decision 80), major after.
want_so=$want_major
if [ "$want_major" = 0 ]; then
    want_so=$(echo "$want_version" | cut -d. -f1-2)
fi
check "version read from relock.h ($want_version)" -- test -n "$want_version"

if ! cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log" 2>&1; then
    bad "cmake --install failed: $(tail -5 "$TMP/install.log")"
    echo "install_consumers: $pass passed, $fail failed"
    exit 1
fi
ok

# --- what was installed
LIBDIR=$(dirname "$(find "$PREFIX" -name relock.pc -path '*/pkgconfig/*' | head -1)")
LIBDIR=${LIBDIR%/pkgconfig}
check "relock.pc installed" -- test -f "$LIBDIR/pkgconfig/relock.pc"
check "shared library with its SONAME link" -- test -L "$LIBDIR/librelock.so.$want_so"
check "the real shared library" -- test -f "$LIBDIR/librelock.so.$want_version"
check "the development link" -- test -L "$LIBDIR/librelock.so"
soname=$(objdump -p "$LIBDIR/librelock.so.$want_version" | awk '/SONAME/ {print $2}')
check "SONAME is librelock.so.$want_so (got $soname)" -- test "$soname" = "librelock.so.$want_so"
check "static library" -- test -f "$LIBDIR/librelock.a"
check "header" -- test -f "$PREFIX/include/relock/relock.h"
for h in relock_async.h relock_async_libevent.h relock_async_libuv.h; do
    check "header $h" -- test -f "$PREFIX/include/relock/$h"
done
named=$(grep -ril hiredis "$PREFIX/include")
check "no installed header names hiredis (found: $named)" -- test -z "$named"
for f in relockConfig.cmake relockConfigVersion.cmake relockTargets.cmake; do
    check "$f installed" -- test -f "$LIBDIR/cmake/relock/$f"
done
check "the command" -- test -x "$PREFIX/bin/relock"
check "the example configuration" -- test -f "$PREFIX/share/doc/relock/examples/relock.conf"
for m in man1/relock.1 man3/relock.3 man5/relock.conf.5; do
    check "man page $m" -- test -f "$PREFIX/share/man/$m"
done
# Nothing else: the list of installed files is exactly the one above.
unexpected=$(cd "$PREFIX" && find . \( -type f -o -type l \) | sed 's|^\./||' | grep -Ev \
    '^(bin/relock|include/relock/relock(_async(_libevent|_libuv)?)?\.h|lib[^/]*(/[^/]*)?/(librelock\.(so(\.[0-9.]+)?|a)|pkgconfig/relock\.pc|cmake/relock/relock(Config|ConfigVersion|Targets(-[a-z]+)?)\.cmake)|share/man/man[135]/relock(\.conf)?\.[135]|share/doc/relock/examples/relock\.conf)$')
check "nothing else installed (found: $unexpected)" -- test -z "$unexpected"
# Exported targets must not name build-only targets.
check "no PkgConfig:: target in the export" -- \
    bash -c "! grep -q 'PkgConfig::' '$LIBDIR/cmake/relock/relockTargets.cmake'"
check "no build path in the export" -- \
    bash -c "! grep -qF '$BUILD' '$LIBDIR'/cmake/relock/relockTargets*.cmake"
# The installed command finds its library without help, and says its version.
out=$(env -u LD_LIBRARY_PATH "$PREFIX/bin/relock" --version 2>&1)
check "installed relock --version: $out" -- test "$out" = "relock $want_version"

# --- pkg-config
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
v=$(pkg-config --modversion relock 2>&1)
check "pkg-config --modversion relock: $v" -- test "$v" = "$want_version"
flags=$(pkg-config --cflags --libs relock 2>&1)
# ${pcfiledir}-relative: the -I and -L of relock are the prefix's, however spelt.
inc=$(tr ' ' '\n' <<<"$flags" | sed -n 's/^-I//p' | head -1)
lib=$(tr ' ' '\n' <<<"$flags" | sed -n 's/^-L//p' | head -1)
check "pkg-config -I is the prefix's include/relock: $flags" -- \
    test "$(realpath -m "$inc")" = "$(realpath -m "$PREFIX/include/relock")"
check "pkg-config -L is the prefix's libdir: $flags" -- \
    test "$(realpath -m "$lib")" = "$(realpath -m "$LIBDIR")"
# shellcheck disable=SC2086
if cc -std=c11 $CFLAGS_EXTRA -o "$TMP/consumer-pc" "$HERE/consumer.c" $flags 2>"$TMP/cc.log"; then
    ok
    out=$(LD_LIBRARY_PATH=$LIBDIR "$TMP/consumer-pc" 2>&1)
    check "pkg-config consumer prints the version: $out" -- \
        test "$out" = "relock $want_version: RELOCK_LOST: lock was lost (expired, taken over or deleted)"
else
    bad "building with pkg-config failed: $(cat "$TMP/cc.log")"
fi
# A hiredis that cannot be included, ahead of the system's on the include
# path: the public headers must not reach for it.  Only the installed
# include directory is given (pkg-config's Cflags also carry hiredis's,
# through Requires.private, which the static library needs).
bare="-I$PREFIX/include/relock -L$LIBDIR -lrelock"
mkdir -p "$TMP/nohiredis/hiredis"
for h in hiredis.h async.h read.h sds.h alloc.h; do
    echo '#error "a header of relock included hiredis"' >"$TMP/nohiredis/hiredis/$h"
done
printf '#include <relock.h>\n#include <relock_async.h>\nint main(void) { return relock_async_pending(0) != 0; }\n' >"$TMP/bare.c"
# shellcheck disable=SC2086
if cc -std=c11 -Wall -Wextra -Werror $CFLAGS_EXTRA -I"$TMP/nohiredis" -o "$TMP/bare" "$TMP/bare.c" $bare \
    2>"$TMP/ccb.log" && LD_LIBRARY_PATH=$LIBDIR "$TMP/bare"; then
    ok
else
    bad "relock.h and relock_async.h without hiredis: $(cat "$TMP/ccb.log")"
fi
# The loop helpers compile as installed, with the program's own loop
# library only (no hiredis to include or link), warnings as errors.
for loop in libevent libuv; do
    printf '#include <relock_async_%s.h>\nint main(void) { relock_async_loop l; (void)l; return relock_async_pending(0) != 0; }\n' \
        "$loop" >"$TMP/async-$loop.c"
    lflags=$(pkg-config --cflags --libs "$([ $loop = libevent ] && echo libevent || echo libuv)" 2>/dev/null)
    # shellcheck disable=SC2086
    # uv.h needs the POSIX declarations (-D_GNU_SOURCE, or -std=gnu11).
    if cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $CFLAGS_EXTRA -I"$TMP/nohiredis" -o "$TMP/async-$loop" \
        "$TMP/async-$loop.c" $bare $lflags 2>"$TMP/cca.log" && LD_LIBRARY_PATH=$LIBDIR "$TMP/async-$loop"; then
        ok
    else
        bad "the installed relock_async_$loop.h: $(cat "$TMP/cca.log")"
    fi
done
unset PKG_CONFIG_PATH

# --- CMake: find_package(relock CONFIG REQUIRED)
mkdir -p "$TMP/proj"
cat >"$TMP/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(relock_consumer LANGUAGES C)
find_package(relock $want_so CONFIG REQUIRED)
if(NOT relock_VERSION STREQUAL "$want_version")
  message(FATAL_ERROR "relock_VERSION is \${relock_VERSION}")
endif()
add_executable(x "$HERE/consumer.c")
target_link_libraries(x relock::relock)
add_executable(x_static "$HERE/consumer.c")
target_link_libraries(x_static relock::relock_static)
# The package's include directory is enough, without hiredis's.
target_include_directories(x BEFORE PRIVATE "$TMP/nohiredis")
target_include_directories(x_static BEFORE PRIVATE "$TMP/nohiredis")
CMAKE
if cmake -S "$TMP/proj" -B "$TMP/proj/build" -DCMAKE_PREFIX_PATH="$PREFIX" \
    -DCMAKE_C_FLAGS="$CFLAGS_EXTRA" >"$TMP/cmake.log" 2>&1 &&
    cmake --build "$TMP/proj/build" >>"$TMP/cmake.log" 2>&1; then
    ok
    for x in x x_static; do
        out=$(env -u LD_LIBRARY_PATH "$TMP/proj/build/$x" 2>&1)
        check "CMake consumer $x prints the version: $out" -- \
            test "$out" = "relock $want_version: RELOCK_LOST: lock was lost (expired, taken over or deleted)"
    done
    check "x links the shared library" -- bash -c "ldd '$TMP/proj/build/x' | grep -q 'librelock.so.$want_so => $LIBDIR'"
    check "x_static does not" -- bash -c "! ldd '$TMP/proj/build/x_static' | grep -q librelock"
else
    bad "the CMake consumer failed: $(tail -20 "$TMP/cmake.log")"
fi
# Another ABI is refused: another major, and before 1.0 another minor
# (SameMinorVersion, decision 80).
if [ "$want_major" = 0 ]; then
    other=0.$(($(echo "$want_version" | cut -d. -f2) + 1))
else
    other=$((want_major + 1))
fi
sed -i "s/find_package(relock $want_so CONFIG REQUIRED)/find_package(relock $other CONFIG REQUIRED)/" "$TMP/proj/CMakeLists.txt"
check "find_package(relock $other) is refused" -- \
    bash -c "! cmake -S '$TMP/proj' -B '$TMP/proj/build2' -DCMAKE_PREFIX_PATH='$PREFIX' >/dev/null 2>&1"

echo "install_consumers: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
