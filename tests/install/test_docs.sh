#!/usr/bin/env bash
# The docs agree with the code and with each other, where a machine can
# tell (test_man.sh checks the man pages against the headers and tables):
#   - every long option that `relock COMMAND --help` names is described in
#     relock(1) and in docs/cli.md;
#   - every command of src/cli/main.c has a section in docs/cli.md;
#   - every public function of include/relock/relock.h and
#     include/relock/relock_async.h is named in docs/api.md (whole, or as `_suffix()` or a FIELD of its family's
#     accessor table), and every status code and callback type too;
#   - every setting of the table in src/base/config.c is described in
#     docs/configuration.md and in relock.conf(5).
#   test_docs.sh SOURCE_DIR PATH/TO/relock
set -u
SRC=${1:?usage: test_docs.sh SOURCE_DIR PATH/TO/relock}
RELOCK=${2:?usage: test_docs.sh SOURCE_DIR PATH/TO/relock}

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

cmds=$(sed -n '/^} commands\[\] = {/,/^};/p' "$SRC/src/cli/main.c" | grep -o '{"[a-z]*"' | tr -d '{"')
[ "$(wc -w <<<"$cmds")" -ge 9 ] && ok || bad "too few commands found in src/cli/main.c: $cmds"
for c in $cmds; do
    if grep -q "^### $c\$" "$SRC/docs/cli.md"; then ok; else bad "docs/cli.md has no section ### $c"; fi
    help=$("$RELOCK" "$c" --help 2>&1) || { bad "relock $c --help failed"; continue; }
    for o in $(grep -oE -- '--[a-z][a-z-]+' <<<"$help" | sort -u); do
        # In the man page source a hyphen is written \-.
        m=$(sed 's/-/\\\\-/g' <<<"$o")
        if grep -q -- "$m" "$SRC/docs/man/relock.1"; then ok; else bad "relock.1 does not describe $c $o"; fi
        if grep -qE -- "(\`|[ ([])$o([] =\`,)]|$)" "$SRC/docs/cli.md"; then ok; else bad "docs/cli.md does not describe $c $o"; fi
    done
done

funcs=$(cat "$SRC/include/relock/relock.h" "$SRC/include/relock/relock_async.h" | tr '\n' ' ' | grep -o 'RELOCK_EXTERN [^;]*' |
    grep -o 'relock_[a-z_]*(' | tr -d '(' | sort -u)
[ "$(wc -w <<<"$funcs")" -gt 30 ] && ok || bad "too few functions found in include/relock/relock.h"
for f in $funcs; do
    y=$(sed -E 's/^relock_(inspect_info|scan_result|server_info)_//' <<<"$f")
    if grep -q "\b$f\b" "$SRC/docs/api.md" || grep -qE "\`_?$y(\`|\()" "$SRC/docs/api.md"; then
        ok
    else
        bad "docs/api.md does not name $f()"
    fi
done
# ... and every callback type a program writes a function for.
for t in $(cat "$SRC/include/relock/relock.h" "$SRC/include/relock/relock_async.h" | grep -o 'typedef [a-z ]*(\*relock_[a-z_]*)' |
    grep -o 'relock_[a-z_]*'); do
    if grep -q "\b$t\b" "$SRC/docs/api.md"; then ok; else bad "docs/api.md does not name the callback type $t"; fi
done
for code in $(grep -o '^    X([A-Z]*,' "$SRC/include/relock/relock.h" | sed 's/    X(\(.*\),/RELOCK_\1/'); do
    if grep -q "\b$code\b" "$SRC/docs/api.md"; then ok; else bad "docs/api.md does not name $code"; fi
done

settings=$(sed -n '/^static const setting settings\[\] = {/,/^};/p' "$SRC/src/base/config.c" |
    grep -v 'T_GROUP' | grep -o '{"[a-z_.]*"' | tr -d '{"')
[ "$(wc -w <<<"$settings")" -gt 15 ] && ok || bad "too few settings found in src/base/config.c"
for s in $settings; do
    if grep -q "\`$s\`" "$SRC/docs/configuration.md"; then ok; else bad "docs/configuration.md does not describe $s"; fi
done

echo "docs_agree: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
