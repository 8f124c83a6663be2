#!/usr/bin/env bash
# e2e.sh is `make cluster-e2e` (and the last step of `make test`): it builds what the one-node cluster
# needs (scripts/testbin.sh), starts it (up.sh), builds warmd's image and pushes it to the node's registry
# (`make image IMAGE=...`), runs the cluster e2e (test/cluster) and tears the cluster down (down.sh),
# whatever the outcome. Extra arguments go to `go test` (e.g. -race, -run).
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
bin=$(scripts/testbin.sh debian containerd versitygw kube cluster | tail -1)
envfile=$(mktemp /tmp/warmd-cluster.XXXXXX)
trap 'scripts/cluster/down.sh "$envfile"' EXIT
scripts/cluster/up.sh "$bin" "$envfile"
# shellcheck disable=SC1090
. "$envfile"
image=$WARMD_CLUSTER_REGISTRY/warmd/warmd:e2e
if [ -z "${WARMD_CLUSTER_IMAGE:-}" ]; then
  make --no-print-directory image IMAGE="$image"
  export WARMD_CLUSTER_IMAGE=$image
fi
export WARMD_CLUSTER_ENV=$envfile
go test -count=1 -v -timeout 15m "$@" ./test/cluster/
echo "cluster e2e: $(($(date +%s) - start))s (cluster start ${WARMD_CLUSTER_STARTED_S}s)"
