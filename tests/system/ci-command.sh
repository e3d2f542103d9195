#!/usr/bin/env bash
# ci-command.sh -- README's Quick start is two commands, one that serves and
# one that tests, each installing what it needs first; CI runs exactly the
# test commands README gives users (the Quick start's, then the Tests
# section's), in that order, after installing every dependency set.
. "$(dirname "$0")/lib.sh"

readme=$top/README.md
quick=$(awk '/^## Quick start/ { on = 1; next } /^## / { on = 0 } on' "$readme" |
    sed -n 's/^    \(make [a-z -]*[a-z]\)  *#.*/\1/p')
if [ "$(wc -l <<<"$quick")" = 2 ] &&
    [ "$(sed -n 1p <<<"$quick")" = "make deps run" ] &&
    [ "$(sed -n 2p <<<"$quick")" = "make deps test" ]; then
    ok "README's Quick start is two commands: make deps run, make deps test"
else
    err "Quick start" "expected 'make deps run' and 'make deps test', found: $(paste -sd';' <<<"$quick")"
fi

# Test commands: README's command lines ("    make ...  # ...") whose last
# goal is a test (test, test-*, *-test).
readme_cmds=$(sed -n 's/^    \(make [a-z -]*[a-z]\)  *#.*/\1/p' "$readme" |
    grep -E ' ([a-z]+-)?test(-[a-z]+)?$' | paste -sd';')
ci_cmds=$(grep -v '^#' "$top/.ci/run" | grep '^make ' | paste -sd';')
if [ -n "$readme_cmds" ] && [ "$ci_cmds" = "$readme_cmds" ]; then
    ok ".ci/run runs README's test commands ($readme_cmds)"
else
    err "CI command" "README says '$readme_cmds', .ci/run runs '$ci_cmds'"
fi
first=$(grep -v '^#' "$top/.ci/run" | grep -nE '^(utils/install-deps.sh|make )' | head -n 1)
if [[ $first == *:utils/install-deps.sh\ all ]]; then
    ok ".ci/run installs every dependency set first (utils/install-deps.sh all)"
else
    err "CI install" ".ci/run does not start with utils/install-deps.sh all: $first"
fi
exit $status
