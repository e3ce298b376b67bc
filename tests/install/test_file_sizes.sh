#!/usr/bin/env bash
# The library stays readable file by file.  Fails when a file of the
# library (src/ without the CLI in src/cli/, and compat/) has more than
# 1 200 lines; prints the library's total
# line count, the figure the layout work tracks.
#   test_file_sizes.sh SOURCE_DIR
set -u
SRC=${1:?usage: test_file_sizes.sh SOURCE_DIR}
cd "$SRC" || exit 2
MAX=1200

files=$(find src compat -path src/cli -prune -o \
    -type f \( -name '*.c' -o -name '*.h' \) -print | sort)
n=$(wc -w <<<"$files")
# The reading itself must work, or the check passes for nothing.
if [ "$n" -lt 40 ]; then
    echo "FAIL: only $n library files found under $SRC: the reading is broken"
    exit 1
fi

fails=0
total=0
for f in $files; do
    lines=$(wc -l <"$f")
    total=$((total + lines))
    if [ "$lines" -gt "$MAX" ]; then
        echo "FAIL: $f has $lines lines (at most $MAX): split it by concern"
        fails=$((fails + 1))
    fi
done
echo "library: $total lines in $n files (src/ without src/cli/, and compat/)"
if [ "$fails" -gt 0 ]; then
    echo "$fails file(s) over $MAX lines"
    exit 1
fi
echo "ok: no library file over $MAX lines"
