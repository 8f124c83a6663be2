#!/usr/bin/env bash
# test.sh is `make test`: real services up, every Go test with -race, services down; then the cluster
# e2e (test/cluster) on its own real one-node cluster (scripts/cluster/e2e.sh), which it runs alone so
# its waits do not compete with the other packages' tests for the CPUs.
# go test runs with -json through hack/testsum, which prints what plain go test prints plus every
# skip with its reason, and ends with one line: "N passed, N failed, N skipped (...) in N packages".
# With CI set (.ci/run sets it) a skip not on scripts/test-skips.txt fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
runs=$(mktemp -d "${TMPDIR:-/tmp}/warmd-test.XXXXXX")
trap 'rm -rf "$runs"' EXIT
go build -o "$runs/testsum" ./hack/testsum
export WARMD_TESTSUM=$runs/testsum WARMD_TESTSUM_RAW=$runs/cluster.json
mapfile -t pkgs < <(go list ./... | grep -vx 'warmd.io/warmd/test/cluster')
status=0
scripts/with-testenv.sh go test -json -race -timeout 40m -count=1 "${pkgs[@]}" |
  "$WARMD_TESTSUM" -raw "$runs/packages.json" || status=$?
echo "make test: packages $(( $(date +%s) - start ))s"
if [ "$status" -eq 0 ]; then
  # All of test/cluster: the cluster itself (TestNodeRunsPods), then warmd installed from charts/warmd
  # with the image `make image` builds and pushes to the node's registry (TestWarmdOnARealNode).
  scripts/cluster/e2e.sh -race || status=$?
fi
echo "make test: $(( $(date +%s) - start ))s"
# The closing line, over both runs (and exit 1 on any failure, or in CI on a skip off the list).
touch "$runs/cluster.json"
"$WARMD_TESTSUM" -report "$runs/packages.json" "$runs/cluster.json" || status=$?
exit "$status"
