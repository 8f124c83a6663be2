#!/usr/bin/env bash
# test.sh is `make test`: real services up, every Go test with -race, services down; then the cluster
# e2e (test/cluster) on its own real one-node cluster (scripts/cluster/e2e.sh), which it runs alone so
# its waits do not compete with the other packages' tests for the CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
mapfile -t pkgs < <(go list ./... | grep -vx 'warmd.io/warmd/test/cluster')
scripts/with-testenv.sh go test -race -timeout 40m -count=1 "${pkgs[@]}"
echo "make test: packages $(( $(date +%s) - start ))s"
# All of test/cluster: the cluster itself (TestNodeRunsPods), then warmd installed from charts/warmd with
# the image `make image` builds and pushes to the node's registry (TestWarmdOnARealNode).
scripts/cluster/e2e.sh -race
echo "make test: $(( $(date +%s) - start ))s"
