#!/usr/bin/env bash
# Builds real Redis and Valkey releases from their source archives and
# caches the binaries outside the repository (docs/matrix.md).
#
#   servers.sh list DIR              the versions DIR holds archives of, oldest first
#   servers.sh build DIR VERSION     prints the path of that version's cached server
#                                    binary, building it first when not cached
#
# VERSION is the archive's name without "redis-" and ".tar.gz": 2.0.5, 7.4.1,
# valkey-8.0.1.  The cache is ${RELOCK_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/relock/servers}/VERSION/,
# keyed by the archive's SHA-256: the same archive is never built twice; a
# different archive of the same name is built again.  Builds run under
# nice -n 19 with make -j2, with the flags old releases need on today's gcc.
set -euo pipefail

CACHE=${RELOCK_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/relock/servers}

archive_of() { # DIR VERSION
    case $2 in
        valkey-*) echo "$1/$2.tar.gz" ;;
        *) echo "$1/redis-$2.tar.gz" ;;
    esac
}

# Sorts versions by number, Redis before Valkey.
cmd_list() {
    local dir=$1 f v
    for f in "$dir"/redis-*.tar.gz "$dir"/valkey-*.tar.gz; do
        [ -e "$f" ] || continue
        v=$(basename "$f" .tar.gz)
        v=${v#redis-}
        echo "$v"
    done | awk '{ k = $0; p = 0; if (k ~ /^valkey-/) { p = 1; sub(/^valkey-/, "", k) }
                 split(k, a, "."); printf "%d %05d %05d %05d %s\n", p, a[1], a[2], a[3], $0 }' |
        sort | awk '{ print $5 }'
}

cmd_build() {
    local dir=$1 v=$2 archive sum dest work top bin cc
    archive=$(archive_of "$dir" "$v")
    [ -f "$archive" ] || { echo "servers.sh: no archive $archive" >&2; return 2; }
    sum=$(sha256sum "$archive" | cut -d' ' -f1)
    dest=$CACHE/$v
    if [ -x "$dest/server" ] && [ "$(cat "$dest/source.sha256" 2>/dev/null)" = "$sum" ]; then
        echo "$dest/server"
        return 0
    fi
    mkdir -p "$CACHE"
    work=$(mktemp -d "$CACHE/.build-$v-XXXXXX")
    tar -xzf "$archive" -C "$work"
    top=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
    # Lines 2.x to 4.x: duplicate tentative definitions need -fcommon.
    cc=cc
    case $v in
        2.*|3.*|4.*) cc='cc -fcommon -w' ;;
    esac
    # 2.0: its Makefile puts -lm before the objects.
    case $v in 2.0.*) cc="$cc -Wl,--no-as-needed" ;; esac
    # 2.2: one line of its bundled hiredis does not compile.
    case $v in
        2.2.*) sed -i 's/va_arg(ap,void);/va_arg(ap,void*);/' "$top/deps/hiredis/hiredis.c" ;;
    esac
    if ! (cd "$top" && nice -n 19 make -j2 MALLOC=libc CC="$cc" >"$work/build.log" 2>&1); then
        echo "servers.sh: building $v failed; log: $work/build.log" >&2
        return 1
    fi
    for bin in "$top/redis-server" "$top/src/redis-server" "$top/src/valkey-server"; do
        [ -x "$bin" ] && break
    done
    [ -x "$bin" ] || { echo "servers.sh: $v built no server binary ($work)" >&2; return 1; }
    rm -rf "$dest"
    mkdir -p "$dest"
    cp "$bin" "$dest/server"
    echo "$sum" >"$dest/source.sha256"
    rm -rf "$work"
    echo "$dest/server"
}

case ${1:-} in
    list) cmd_list "$2" ;;
    build) cmd_build "$2" "$3" ;;
    *) echo "usage: servers.sh list DIR | build DIR VERSION" >&2; exit 2 ;;
esac
