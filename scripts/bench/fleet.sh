#!/usr/bin/env bash
# fleet.sh is `make bench-fleet`: one model (MODEL_BYTES, default 2 GiB) to NODES `warmd run` processes
# (default 8, each with its own data dir and 127.0.0.x address) on one kube-apiserver and one versitygw
# origin behind the fault proxy. First one node alone measures a node's fetch rate; the origin is then
# capped at an eighth of it, and the fleet is timed with peers and without (test/fleet,
# TestFleetWarmsFromPeers with WARMD_FLEET_BENCH=1). All nodes share this machine's CPUs and disk, so
# the figures are a lower bound on what separate machines give, and noisy on a busy machine.
# Last line: fleet: nodes <N>, origin_bytes_ratio <R>, all_warm <T>s, without_peers <U>s, speedup <U/T>
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS=-buildvcs=false
MODEL_BYTES=${MODEL_BYTES:-$((2 << 30))}
NODES=${NODES:-8}
need_kb=$(((MODEL_BYTES * (2 * NODES + 2)) / 1024))
avail=$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR==2 {print $4}')
if [ "$avail" -lt "$need_kb" ]; then
  echo "bench-fleet: need $((need_kb >> 20)) GiB free under ${TMPDIR:-/tmp}; have $((avail >> 20)) GiB" >&2
  exit 1
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
WARMD_FLEET_BENCH=1 WARMD_FLEET_NODES=$NODES WARMD_FLEET_MODEL_BYTES=$MODEL_BYTES \
  go test -count=1 -timeout 120m -v -run TestFleetWarmsFromPeers ./test/fleet/ 2>&1 | grep -v '^[IW][0-9]' | tee "$out" >&2
grep '^fleet: ' "$out" | tail -1
