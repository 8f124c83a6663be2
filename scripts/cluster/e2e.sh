#!/usr/bin/env bash
# e2e.sh is `make cluster-e2e` (and the last step of `make test`): it builds what the one-node cluster
# needs (scripts/testbin.sh), starts it (up.sh), builds warmd's image and pushes it to the node's registry
# (`make image IMAGE=...`), runs the cluster e2e (test/cluster) and tears the cluster down (down.sh),
# whatever the outcome.
# Usage: e2e.sh [--node-only] [go test flags...]
#   --node-only  only TestNodeRunsPods (the cluster itself, no warmd image needed)
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
nodeOnly=
if [ "${1:-}" = --node-only ]; then
  nodeOnly=1
  shift
fi
bin=$(scripts/testbin.sh debian containerd versitygw kube cluster | tail -1)
envfile=$(mktemp /tmp/warmd-cluster.XXXXXX)
trap 'scripts/cluster/down.sh "$envfile"' EXIT
scripts/cluster/up.sh "$bin" "$envfile"
# shellcheck disable=SC1090
. "$envfile"
if [ -z "$nodeOnly" ] && [ -z "${WARMD_CLUSTER_IMAGE:-}" ]; then
  image=$WARMD_CLUSTER_REGISTRY/warmd/warmd:e2e
  make --no-print-directory image IMAGE="$image"
  export WARMD_CLUSTER_IMAGE=$image
fi
export WARMD_CLUSTER_ENV=$envfile
# helm (the install step renders charts/warmd with it) and Prometheus (it scrapes the shipped monitors
# and answers KEDA's queries), from scripts/tools.sh
eval "$(scripts/tools.sh env | grep -E '^export WARMD_TEST_(HELM|PROMETHEUS)=')"
t=$(date +%s)
# The cluster itself first, while the Node still carries the startup taint it registered with (warmd
# removes it once warm); then warmd on it.
# Through hack/testsum -v (every line as -v prints it, and each skip's reason): make test hands its
# build in WARMD_TESTSUM and the file its closing line reads in WARMD_TESTSUM_RAW.
testsum=${WARMD_TESTSUM:-}
if [ -z "$testsum" ]; then
  testsum=$envfile.testsum
  trap 'rm -f "$envfile.testsum"; scripts/cluster/down.sh "$envfile"' EXIT
  go build -o "$testsum" ./hack/testsum
fi
raw=(${WARMD_TESTSUM_RAW:+-raw "$WARMD_TESTSUM_RAW"})
go test -json -count=1 -timeout 5m -run '^TestNodeRunsPods$' "$@" ./test/cluster/ | "$testsum" -v "${raw[@]}"
[ -n "$nodeOnly" ] || go test -json -count=1 -timeout 15m -run '^TestWarmdOnARealNode$' "$@" ./test/cluster/ | "$testsum" -v "${raw[@]}"
echo "cluster e2e: $(($(date +%s) - t))s of tests, $(($(date +%s) - start))s in all (cluster Ready in ${WARMD_CLUSTER_STARTED_S}s)"
