#!/usr/bin/env bash
# The library's layers, as docs/architecture.md draws them, read from the
# sources: which headers each file includes and which library functions it
# calls.  Fails when
#   - a file of the core (src/, src/engine/) includes a header of compat/
#     or of the API layer (src/api/), or compat/ includes one of src/api/;
#   - the folders call each other in a circle (api, compat, core);
#   - two or more files call each other in a circle (a file that calls
#     back up);
#   - a leaf (a core file that includes no private header above base.h and
#     handle.h) or the transport (src/core/transport.c) calls a file that is
#     not a leaf;
#   - a library file includes the umbrella src/internal.h.
# Comments and string literals are left out, so a function named in a
# comment or a message is no call.  A function is a relock_ or relock__
# name defined (not static) in a .c file; a call is any mention of it in
# another file.
#   test_layers.sh SOURCE_DIR
set -u
SRC=${1:?usage: test_layers.sh SOURCE_DIR}
cd "$SRC" || exit 2

TMP=$(mktemp -d /tmp/relock-layers-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The library's own sources (the CLI and the test proxy are programs of
# their own, above the public API).
files=$(ls src/*.[ch] src/base/*.[ch] src/algo/*.[ch] src/algo/engine/*.[ch] src/core/*.[ch] src/api/*.[ch] compat/*.[ch] 2>/dev/null)

layer() {
    case $1 in
    src/api/*) echo api ;;
    compat/*) echo compat ;;
    *) echo core ;;
    esac
}

# Comments and literals out; one cleaned copy per file.
for f in $files; do
    mkdir -p "$TMP/clean/$(dirname "$f")"
    perl -0777 -pe 's{("(?:\\.|[^"\\\n])*")|(\x27(?:\\.|[^\x27\\\n])*\x27)|(/\*.*?\*/)|(//[^\n]*)}{defined $1 ? q("") : defined $2 ? q(\x27\x27) : q( )}gse' \
        "$f" >"$TMP/clean/$f"
done

# Definitions: "file symbol" for every function or object with external
# linkage a .c file defines.
for f in $files; do
    case $f in *.c) ;; *) continue ;; esac
    F=$f perl -0777 -ne '
        while (/^(?!static\b)(?!extern\b)[A-Za-z_][\w \t*]*?\b(relock_\w+)\s*\([^;{]*\)\s*\{/mg) { print "$ENV{F} $1\n" }
        while (/^(?!static\b)(?!extern\b)(?:const\s+)?\w+\s+\**(relock_\w+)\s*(?:\[[^\]]*\])*\s*=/mg) { print "$ENV{F} $1\n" }
    ' "$TMP/clean/$f"
done | sort -u >"$TMP/defs"

# Calls: "caller callee-file" for each mention, in a .c file, of another
# file's symbol (headers declare; they are read for their includes).
awk '{print $2, $1}' "$TMP/defs" | sort -k1,1 >"$TMP/owner"
for f in $files; do
    case $f in *.c) ;; *) continue ;; esac
    grep -ow 'relock_[A-Za-z0-9_]*' "$TMP/clean/$f" | sort -u | join - "$TMP/owner" |
        awk -v f="$f" '$2 != f {print f, $2}'
done | sort -u >"$TMP/calls"

# Includes: "file header" for each #include "..." that names a file of the
# library (looked for beside the file, then in src/, as the build does).
for f in $files; do
    d=$(dirname "$f")
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
        if [ -f "$d/$h" ]; then
            realpath -m --relative-to=. "$d/$h"
        else
            for dir in src src/base src/algo compat src/core src/api; do
                [ -f "$dir/$h" ] && { echo "$dir/$h"; break; }
            done
        fi
    done | sed "s|^|$f |"
done | sort -u >"$TMP/includes"

ndefs=$(wc -l <"$TMP/defs")
ncalls=$(wc -l <"$TMP/calls")
nincl=$(wc -l <"$TMP/includes")
# The reading itself must work, or every check below passes for nothing.
[ "$ndefs" -gt 150 ] || bad "only $ndefs definitions found: the reading of the sources is broken"
[ "$ncalls" -gt 80 ] || bad "only $ncalls calls between files found: the reading is broken"
[ "$nincl" -gt 40 ] || bad "only $nincl includes found: the reading is broken"
grep -q '^src/api/lock.c src/api/owner.c$' "$TMP/calls" ||
    bad "lock.c's call of relock__owner_note not seen: the reading is broken"

# 1. Includes point down: core never includes compat/ or src/api/,
#    compat/ never includes src/api/.
while read -r f h; do
    case "$(layer "$f"):$(layer "$h")" in
    core:compat | core:api | compat:api) bad "$f includes $h (a $(layer "$f") file reaches up into $(layer "$h"))" ;;
    esac
done <"$TMP/includes"

# The umbrella header is for the tests: each library file includes the
# headers of the layers it uses (base.h, handle.h, transport.h,
# routing.h, algo.h, engine/engine.h, api/api.h, ...).
while read -r f h; do
    [ "$h" = src/internal.h ] && bad "$f includes internal.h; include the layer headers it uses"
done <"$TMP/includes"

# 2. Folders: no circle between api, compat and core.
while read -r f g; do
    lf=$(layer "$f") lg=$(layer "$g")
    [ "$lf" != "$lg" ] && echo "$lf $lg"
done < <(cat "$TMP/calls" "$TMP/includes") | sort -u >"$TMP/folders"
if ! tsort "$TMP/folders" >/dev/null 2>"$TMP/floop"; then
    bad "a circle between folders: $(grep -v 'input contains a loop' "$TMP/floop" | sed 's/^tsort: //' | tr '\n' ' ')"
fi
# The intended order is api above compat above core: name what goes up.
rank() { case $1 in api) echo 3 ;; compat) echo 2 ;; *) echo 1 ;; esac; }
while read -r f g; do
    [ "$(rank "$(layer "$f")")" -lt "$(rank "$(layer "$g")")" ] &&
        bad "$f calls up into $g ($(layer "$f") -> $(layer "$g"))"
done <"$TMP/calls"

# Leaves (core files that include no private header above base.h and
# handle.h)
# call only leaves, and the transport calls only leaves.
leafy() {
    ! grep "^$1 " "$TMP/includes" | awk '{print $2}' |
        grep -qvE '^src/base/(base|handle|lease|caps|relockx)\.h$|^src/relock\.h$|^src/algo/engine/waitplan\.h$'
}
leaves=" "
for f in $files; do
    case $f in src/api/*) ;; *.c) leafy "$f" && leaves="$leaves$f " ;; esac
done
while read -r f g; do
    case "$leaves" in *" $f "*) ;; *) [ "$f" = src/core/transport.c ] || continue ;; esac
    case "$leaves" in *" $g "*) ;; *) bad "$f, a leaf or the transport, calls $g, which is not a leaf" ;; esac
done <"$TMP/calls"
[ "$(wc -w <<<"$leaves")" -ge 6 ] || bad "only these leaves found:$leaves: the reading is broken"

# 3. Files: no circle of calls.
{ cat "$TMP/calls"; awk '{print $2, $2}' "$TMP/defs"; } >"$TMP/graph"
if ! tsort "$TMP/graph" >/dev/null 2>"$TMP/loop"; then
    bad "files call each other in a circle: $(grep -v 'input contains a loop' "$TMP/loop" | sed 's/^tsort: //' | tr '\n' ' ')"
fi

echo "layers: $ndefs definitions, $ncalls calls between files, $nincl includes read;" \
    "folders: $(tr '\n' ';' <"$TMP/folders") leaves:$leaves"
if [ "$fails" -gt 0 ]; then
    echo "$fails problem(s); docs/architecture.md shows the layers"
    exit 1
fi
echo "ok: no file calls back up"
