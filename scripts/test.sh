#!/usr/bin/env bash
# test.sh is `make test`: real services up, every Go test with -race, services down.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/with-testenv.sh go test -race -timeout 40m -count=1 ./...
echo "make test: $(( $(date +%s) - start ))s"
