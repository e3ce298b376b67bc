#!/usr/bin/env bash
# The library's layers, as docs/architecture.md draws them: a folder per
# layer, read from the sources (which headers each file includes, which
# library functions it calls).  From the bottom up:
#   src/base/   the leaves: calls nothing above it;
#   src/algo/   the step machines and the engine's pure parts: calls
#               src/base/ only;
#   compat/     the timestamp algorithms' machines: calls src/algo/ (the
#               engine and its sub-machines) and src/base/;
#   src/core/   the drivers (connections, routing, the blocking runs of
#               the machines): calls compat/, src/algo/ and src/base/;
#   src/api/    the public entry points: calls any folder below it.
# Fails when
#   - a file calls a function of a higher folder, or includes a header of
#     one (the public headers in include/relock/ are below every folder);
#   - a file of src/base/, src/algo/ or compat/ calls hiredis's I/O (the
#     machines and the leaves do no I/O);
#   - the folders, or two or more files, call each other in a circle;
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
files=$(ls src/*.[ch] src/base/*.[ch] src/algo/*.[ch] src/algo/engine/*.[ch] compat/*.[ch] \
    src/core/*.[ch] src/api/*.[ch] 2>/dev/null)

# A file's layer, and the layers' order from the bottom up.  The public
# headers in src/ (relock.h, relock_async*.h) are below every folder; the
# umbrella src/internal.h is the tests', above them all.
# The operation core's files (the asynchronous driver, cut by concern)
# count as one file in the check for circles: they feed each other by
# design.
OPCORE='src/core/connection.c src/core/routing.c src/core/notice.c src/core/operation.c src/core/fanout.c src/core/renewal.c src/core/scan.c src/core/core.h'
opcore() { case " $OPCORE " in *" $1 "*) return 0 ;; esac; return 1; }
layer() {
    case $1 in
    src/internal.h) echo tests ;;
    src/base/*) echo base ;;
    src/algo/*) echo algo ;;
    compat/*) echo compat ;;
    src/core/*) echo core ;;
    src/api/*) echo api ;;
    src/*) echo public ;;
    *) echo unknown ;;
    esac
}
rank() {
    case $1 in
    public) echo 0 ;; base) echo 1 ;; algo) echo 2 ;; compat) echo 3 ;; core) echo 4 ;;
    api) echo 5 ;; tests) echo 6 ;; *) echo 9 ;;
    esac
}
for f in $files; do
    [ "$(layer "$f")" = unknown ] && bad "$f is in no layer's folder"
done

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
grep -q '^src/api/lock.c src/core/pollloop.c$' "$TMP/calls" ||
    bad "lock.c's call of relock__lock_op not seen: the reading is broken"
grep -q '^src/core/mode.c compat/legacy.c$' "$TMP/calls" ||
    bad "mode.c's call of relock__ts_adopt_init not seen: the reading is broken"
grep -q '^src/algo/modern.h src/algo/engine/engine.h$' "$TMP/includes" ||
    bad "modern.h's include of engine/engine.h (through the layer folders) not seen: the reading is broken"
for d in src/base src/algo compat src/core src/api; do
    n=$(grep -c "^$d/[^/ ]*\.c\$\|^$d/engine/[^/ ]*\.c\$" <<<"$(tr ' ' '\n' <<<"$files")")
    [ "$n" -ge 3 ] || bad "only $n source files found in $d: the reading is broken"
done

# 1. Includes point down: no file includes a header of a higher folder.
while read -r f h; do
    [ "$h" = src/internal.h ] && continue # reported below
    [ "$(rank "$(layer "$f")")" -lt "$(rank "$(layer "$h")")" ] &&
        bad "$f includes $h (the $(layer "$f") layer reaches up into $(layer "$h"))"
done <"$TMP/includes"

# The umbrella header is for the tests: each library file includes the
# headers of the layers it uses (base.h, handle.h, engine/engine.h, the
# machines' headers, routing.h, algo.h, api.h, ...).
while read -r f h; do
    [ "$h" = src/internal.h ] && bad "$f includes internal.h; include the layer headers it uses"
done <"$TMP/includes"

# 2. Calls point down: no file calls a function of a higher folder.
while read -r f g; do
    [ "$(rank "$(layer "$f")")" -lt "$(rank "$(layer "$g")")" ] &&
        bad "$f calls up into $g ($(layer "$f") -> $(layer "$g"))"
done <"$TMP/calls"

# The leaves and the machines do no I/O: none of hiredis's sending,
# reading or connecting functions in src/base/, src/algo/ or compat/.
for f in $files; do
    case $(layer "$f") in base | algo | compat) ;; *) continue ;; esac
    io=$(grep -owE 'redis(Command|CommandArgv|AppendCommand|AppendCommandArgv|AppendFormattedCommand|GetReply|Connect[A-Za-z]*|Reconnect|BufferWrite|BufferRead|Async[A-Za-z]*)' "$TMP/clean/$f" | sort -u | tr '\n' ' ')
    [ -n "$io" ] && bad "$f, in the $(layer "$f") layer, does I/O: $io"
done

# Folders: no circle between them.
while read -r f g; do
    lf=$(layer "$f") lg=$(layer "$g")
    [ "$lf" != "$lg" ] && echo "$lf $lg"
done < <(cat "$TMP/calls" "$TMP/includes") | sort -u >"$TMP/folders"
if ! tsort "$TMP/folders" >/dev/null 2>"$TMP/floop"; then
    bad "a circle between folders: $(grep -v 'input contains a loop' "$TMP/floop" | sed 's/^tsort: //' | tr '\n' ' ')"
fi

# 3. Files: no circle of calls.
{ cat "$TMP/calls"; awk '{print $2, $2}' "$TMP/defs"; } |
    while read -r f g; do
        opcore "$f" && f=src/core/operation-core
        opcore "$g" && g=src/core/operation-core
        [ "$f" = "$g" ] || echo "$f $g"
    done >"$TMP/graph"
if ! tsort "$TMP/graph" >/dev/null 2>"$TMP/loop"; then
    bad "files call each other in a circle: $(grep -v 'input contains a loop' "$TMP/loop" | sed 's/^tsort: //' | tr '\n' ' ')"
fi

echo "layers: $ndefs definitions, $ncalls calls between files, $nincl includes read;" \
    "between folders: $(tr '\n' ';' <"$TMP/folders")"
if [ "$fails" -gt 0 ]; then
    echo "$fails problem(s); docs/architecture.md shows the layers"
    exit 1
fi
echo "ok: no file calls back up"
