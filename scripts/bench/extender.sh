#!/usr/bin/env bash
# bench/extender.sh: the scheduler extender's /prioritize latency over 5,000 Nodes (make bench-extender).
# The Nodes are created in the real kube-apiserver (KUBEBUILDER_ASSETS, from with-testenv.sh) and read by
# the extender's informer; 10,000 nodeCacheCapable requests naming every Node go over loopback HTTP, one
# at a time (pkg/extender/bench_test.go, TestBenchExtender). Knobs: WARMD_BENCH_NODES, WARMD_BENCH_REQUESTS.
# The last line is: extender: p50 <X.XX> ms, p99 <Y.YY> ms over <N> nodes
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${KUBEBUILDER_ASSETS:?run through scripts/with-testenv.sh (make bench-extender) or source testenv.env}"
export GOFLAGS=-buildvcs=false
log=$(mktemp /tmp/warmd-bench-extender.XXXXXX)
trap 'rm -f "$log"' EXIT
go test -tags bench -count=1 -timeout 20m -run '^TestBenchExtender$' -v ./pkg/extender/ >"$log" 2>&1 || {
	cat "$log"
	exit 1
}
grep -E '^\s+bench_test.go' "$log" | sed 's/^\s*//' || true
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs (the tail is sensitive to CPU contention)"
grep -E '^extender: p50 [0-9.]+ ms, p99 [0-9.]+ ms over [0-9]+ nodes$' "$log" | tail -1
