#!/usr/bin/env bash
# Every reference in the repository resolves inside it.  Fails when
#   - a file cites a document outside the repository: the first design
#     file (its name in capitals, alone with a section sign or with .md),
#     or the style and fact files that lived in the directory "shared"
#     beside the repository (anything there except the default directory
#     of the source archives that ./dev matrix reads, which is input, not a
#     citation);
#   - a file cites "design.md §N" (or a range §N-M) and docs/design.md has
#     no section N;
#   - a file cites "decision N" (also "decisions N-M, K and L", and in
#     docs/decisions.md "amended by N", "superseded by N") and
#     docs/decisions.md has no entry N.
#   test_docs_refs.sh SOURCE_DIR
set -u
SRC=${1:?usage: test_docs_refs.sh SOURCE_DIR}
cd "$SRC" || exit 2
export LC_ALL=C

fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The repository's files: tracked and new ones, where git knows the tree;
# otherwise every file but build directories.  This script names the
# patterns it looks for, so it is left out.
self=tests/install/test_docs_refs.sh
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list=$(git ls-files --cached --others --exclude-standard)
else
    list=$(find . -path ./.git -prune -o -name 'build*' -prune -o -type f -print | sed 's|^\./||')
fi
files=()
while IFS= read -r f; do
    [ -f "$f" ] && [ "$f" != "$self" ] && files+=("$f")
done <<<"$list"
[ ${#files[@]} -gt 0 ] || { echo "FAIL: no files found under $SRC"; exit 1; }

DESIGN_DOC=docs/design.md
DECISIONS=docs/decisions.md
[ -f "$DESIGN_DOC" ] || bad "$DESIGN_DOC is missing"
[ -f "$DECISIONS" ] || bad "$DECISIONS is missing"

# 1. Citations of files outside the repository.  The words are split so
# that this script does not match itself if it is ever searched.
outside="DESIGN"" §|DESIGN""\.md|STYLE""\.md|old-redis""-replies|peer-lock""-formats|sha""red/"
while IFS= read -r hit; do
    case $hit in
    *sha"red/redis-releases"*) ;;
    *) bad "cites a file outside the repository: $hit" ;;
    esac
done < <(grep -InE "$outside" "${files[@]}" 2>/dev/null)

# 2. design.md sections: "## N. Title" and "### N.M Title".
sections=$(grep -oE '^##+ [0-9]+(\.[0-9]+)?' "$DESIGN_DOC" 2>/dev/null | awk '{print $2}' | sed 's/\.$//')
has_section() { grep -qxF "$1" <<<"$sections"; }
while IFS= read -r hit; do
    where=${hit%%:design.md*}
    ref=$(grep -oE '§[0-9]+(\.[0-9]+)?(-[0-9]+(\.[0-9]+)?)?' <<<"$hit" | head -n 1)
    ref=${ref#§}
    for n in ${ref//-/ }; do
        has_section "$n" || bad "$where cites design.md §$n, which docs/design.md does not have"
    done
done < <(grep -IonE 'design\.md\)? §[0-9]+(\.[0-9]+)?(-[0-9]+(\.[0-9]+)?)?' "${files[@]}" 2>/dev/null)

# 3. Decisions: "## N. Title" entries of docs/decisions.md.
entries=$(grep -oE '^## [0-9]+\.' "$DECISIONS" 2>/dev/null | tr -dc '0-9\n')
has_entry() { grep -qxF "$1" <<<"$entries"; }
num='[0-9]+((-|–)[0-9]+)?'
list_re="$num((, | and |, and )$num)*"
check_list() {
    # $1: where, $2: the words that cite, $3: the list of numbers
    local n
    for n in $(sed -E 's/(-|–)/ /g; s/,|and/ /g' <<<"$3"); do
        has_entry "$n" || bad "$1 cites $2 $n, which docs/decisions.md does not have"
    done
}
while IFS= read -r hit; do
    f=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    text=${rest#*:}
    words=$(grep -oE '^[A-Za-z ]+' <<<"$text" | sed 's/ *$//')
    nums=${text#"$words"}
    check_list "$f:$line" "$words" "${nums# }"
done < <(grep -IonE "[Dd]ecisions? $list_re" "${files[@]}" 2>/dev/null)
while IFS= read -r hit; do
    line=${hit%%:*}
    text=${hit#*:}
    words=$(grep -oE '^[A-Za-z ]+' <<<"$text" | sed 's/ *$//')
    nums=${text#"$words"}
    check_list "$DECISIONS:$line" "$words" "${nums# }"
done < <(grep -onE "([Aa]mended|[Ss]uperseded) by $list_re" "$DECISIONS" 2>/dev/null)

# The entries themselves: in number order, each number once.
prev=0
for n in $entries; do
    [ "$n" -gt "$prev" ] || bad "$DECISIONS: entry $n comes after $prev (entries go in number order, each once)"
    prev=$n
done

if [ "$fails" -gt 0 ]; then
    echo "$fails reference(s) do not resolve"
    exit 1
fi
echo "every reference resolves inside the repository (${#files[@]} files)"
