#!/usr/bin/env bash
# soak.sh is `make soak`: the long fault loops that are too slow for `make test`. Runs under
# scripts/with-testenv.sh (the real services are up). Each capability adds its own section.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-buildvcs=false

# --- weights: kill -9 the prefetch process at random points, WARMD_WEIGHTS_KILLS times (>= 200),
# checking every episode publishes an intact model without refetching finished chunks.
echo "soak: weights resume after kill -9 (${WARMD_WEIGHTS_KILLS:=200} kills)" >&2
WARMD_WEIGHTS_KILLS=$WARMD_WEIGHTS_KILLS go test -count=1 -timeout 30m -run '^TestResumeAfterKill$' -v ./pkg/prefetch/weights/ |
  grep -E '^(=== RUN|--- |PASS|FAIL|ok)|episode' | tail -n 40
