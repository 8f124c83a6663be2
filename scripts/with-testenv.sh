#!/usr/bin/env bash
# with-testenv.sh runs a command with the real test services up (built by testbin.sh, started by
# testenv/up.sh) and stops them afterwards, whatever the command's outcome.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/testbin.sh | tail -1)
envfile=$(mktemp /tmp/warmd-testenv.XXXXXX)
trap 'scripts/testenv/down.sh "$envfile"' EXIT
scripts/testenv/up.sh "$bin" "$envfile"
scripts/tools.sh env >>"$envfile" # helm, promtool, qemu-user-static for the chart/image/monitoring tests
# shellcheck disable=SC1090
. "$envfile"
"$@"
