#!/usr/bin/env bash
# ci-command.sh -- CI runs exactly the test command README.md gives users.
. "$(dirname "$0")/lib.sh"

readme_cmd=$(sed -n 's/^    \(make test\)  *#.*/\1/p' "$top/README.md" | head -n 1)
ci_cmd=$(grep -v '^#' "$top/.ci/run" | grep -v '^ *$' | tail -n 1)
if [ -n "$readme_cmd" ] && [ "$ci_cmd" = "$readme_cmd" ]; then
    ok ".ci/run ends with README's test command ($readme_cmd)"
else
    err "CI command" "README says '$readme_cmd', .ci/run runs '$ci_cmd'"
fi
exit $status
