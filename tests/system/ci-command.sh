#!/usr/bin/env bash
# ci-command.sh -- CI runs exactly the test commands README.md's quick start
# gives users (make test, make kernel-test), in that order, after installing
# the dependencies.
. "$(dirname "$0")/lib.sh"

readme_cmds=$(sed -n 's/^    \(make [a-z-]*test\)  *#.*/\1/p' "$top/README.md" | paste -sd';')
ci_cmds=$(grep -v '^#' "$top/.ci/run" | grep '^make ' | paste -sd';')
if [ -n "$readme_cmds" ] && [ "$ci_cmds" = "$readme_cmds" ]; then
    ok ".ci/run runs README's test commands ($readme_cmds)"
else
    err "CI command" "README says '$readme_cmds', .ci/run runs '$ci_cmds'"
fi
if grep -q '^utils/install-deps.sh' "$top/.ci/run"; then
    ok ".ci/run installs the dependencies first"
else
    err "CI install" ".ci/run does not call utils/install-deps.sh"
fi
exit $status
